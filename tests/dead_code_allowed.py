"""Names that `vulture` (run by ``make lint``) reports as unused, but that are read where it
cannot see: by name through ``getattr``, by the interpreter, or as the documented positions of
an unpacking. Each line says who reads it. Not a test module: nothing here runs.
"""
# ruff: noqa: B018, F821

# experiments/compare.py's table reads the headline's numbers by name (getattr).
Headline.compute_share
Headline.data_wait_share
Headline.other_share
# experiments/override.py: `simple` of an ast.AnnAssign, read by compile().
_.simple
# cli.py builds the script's __main__ module as the interpreter does; Python reads these.
_.__package__
_.__spec__
_.__loader__
_.__cached__
# Unpacked names of a list of cells / of row fields: they document each position.
ON
START
# stats.PhaseStats and record.LoopInfo fields: in the JSON report (asdict / vars).
PhaseStats.steps_per_second
PhaseStats.total_time
TimeSplit.data_wait_note
LoopInfo.rows_dropped
# probes/loops.py: LoopHooks holds the rewritten module's code (its constants hold the
# top-level functions' code objects, whose reference counts it compares after the run).
_._code
# tests/conftest.py: a pytest hook, called by pytest by its name.
pytest_collection_modifyitems
# tests/conftest.py: a pytest.Item's methods, which pytest calls to run and report it.
SuiteSetUpFailure.runtest
SuiteSetUpFailure.reportinfo
pytest_collection_finish
# pytest's hooks, called by name by pytest (the claims test's options and parameters).
pytest_addoption
pytest_generate_tests
# tests/conftest.py: pytest reads `pytest_plugins` of a conftest to load the browser fixtures.
pytest_plugins
# benchmarks/calls_per_step.py: a traced frame's flags, read by the interpreter's tracing.
_.f_trace_opcodes
_.f_trace_lines
# benchmarks/nvml_sampler_cpu.py: a stand-in package's path, read by the import system.
_.__path__
# tests/test_diagnose_input.py sets tf.data's optimisation options, which TensorFlow reads.
_.map_parallelization
_.map_and_batch_fusion
_.inject_prefetch
