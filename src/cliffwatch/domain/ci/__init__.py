"""What a pipeline is told of a run or a sweep: named checks that pass, fail, warn or do not apply (``checks``),
built from a run's result (``run_checks``) or a sweep's capacity results (``sweep_checks``). JUnit XML and GitHub
Actions annotations are written from them by ``adapters.ci``."""
