"""``%tfgpu``, the GPU doctor: TensorFlow build and device facts, NVML facts, and their diagnosis.

Facts are plain JSON-able dicts (`tensorflow_facts`, `nvml_facts`, `environment`), the diagnosis
is a pure function of them (`diagnosis`), and the views only render (`render`, `report`).
``from tfdiag_magic.gpu.session_facts import session_facts, gpu_problems`` is the cheap subset
that ``%%tfprofile`` reads at the start of every run. Importing this package imports neither
TensorFlow nor NVML.
"""
