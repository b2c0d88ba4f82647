"""The settings a script or cell makes for TensorFlow before importing it, read from its source
(`tfdiag_magic.early_environment`); `tests/test_faithful_cli.py` runs such a script."""

from __future__ import annotations

from tfdiag_magic.early_environment import settings_before_tensorflow


def test_the_top_levels_constant_settings_before_the_first_import_of_tensorflow():
    source = (
        "import os, sys\n"
        "from os import environ\n"
        "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'\n"
        "environ['CUDA_VISIBLE_DEVICES'] = '-1'\n"
        "os.environ.update(TF_CPP_MIN_LOG_LEVEL='3')\n"
        "os.environ.update({'XLA_FLAGS': '--xla_cpu_enable_fast_math=false'})\n"
        "os.putenv('OMP_NUM_THREADS', '2')\n"
        "os.environ['MY_OWN'] = 'x'  # not one of TensorFlow's: left to its line\n"
        "if sys.platform == 'linux':\n"
        "    os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] = 'true'  # conditional: left\n"
        "os.environ['TF_GPU_ALLOCATOR'] = sys.argv[0]  # not a constant: left\n"
        "import numpy as np\n"
        "import tensorflow as tf\n"
        "os.environ['KERAS_BACKEND'] = 'jax'  # after the import: as late as the code sets it\n"
    )
    assert settings_before_tensorflow(source) == {
        "TF_ENABLE_ONEDNN_OPTS": "0",
        "CUDA_VISIBLE_DEVICES": "-1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "XLA_FLAGS": "--xla_cpu_enable_fast_math=false",
        "OMP_NUM_THREADS": "2",
    }


def test_keras_or_an_import_inside_a_block_starts_tensorflow_too(monkeypatch):
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    monkeypatch.setenv("TF_FORCE_GPU_ALLOW_GROWTH", "false")
    assert settings_before_tensorflow(
        "import os\n"
        "os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')\n"
        "os.environ.setdefault('TF_FORCE_GPU_ALLOW_GROWTH', 'true')  # set already: unchanged\n"
        "try:\n"
        "    from keras import layers\n"
        "except ImportError:\n"
        "    pass\n"
        "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'\n"
    ) == {"TF_CPP_MIN_LOG_LEVEL": "2"}
    assert (
        settings_before_tensorflow(
            "import importlib, os\n"
            "tf = importlib.import_module('tensorflow')\n"
            "os.environ['TF_ENABLE_ONEDNN_OPTS'] = '0'\n"
        )
        == {}
    )


def test_a_cells_env_magic_and_code_that_does_not_parse():
    assert settings_before_tensorflow(
        "%env TF_ENABLE_ONEDNN_OPTS=0\n%env CUDA_VISIBLE_DEVICES 1\n!nvidia-smi\n"
        "import tensorflow as tf\n%env TF_CPP_MIN_LOG_LEVEL=3\n"
    ) == {"TF_ENABLE_ONEDNN_OPTS": "0", "CUDA_VISIBLE_DEVICES": "1"}
    assert settings_before_tensorflow("os.environ['TF_X'] = '1'\nfor\n") == {}
