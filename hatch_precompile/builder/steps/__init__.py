"""The steps route at build: ``save_step`` (``step_capture``) picks the route that fits a step;
the exported route (``export``, ``export_contract``, ``export_proof``, ``trace_reads``, and torch's
internals only a build calls, ``torch_export``) and the check of either route against ``fn``
(``step_check``, ``step_verify`` under ``verify``). The run side's half is run/steps/."""
