"""``%tfgpu``, the GPU doctor: TensorFlow build and device facts, NVML facts, and their diagnosis.

Facts are plain JSON-able dicts (`tensorflow_facts`, `nvml_facts`, `environment`), the diagnosis
is the rules of `diagnose.gpu_rules` on them, and the views only render (`render`, `report`).
``from tfdiag_magic.gpu.session_facts import session_facts`` is the cheap subset
that ``%%tfprofile`` reads at the start of every run. Importing this package imports neither
TensorFlow nor NVML.
"""
