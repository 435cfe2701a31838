"""The served route's touches of torch's internals: a shipped Dynamo cache entry installed on a
function's code, every guard kept (``dynamo_cache``, with ``entry_pickle``, ``entry_graphs``,
``guard_text``, ``thread_count``), which of the package's compiles a call runs under
(``compile_scope``), the compiler's config made when asked (``compiler_config``), and what a trace
reads that no guard holds (``compiler_settings``, ``folded_calls``). ``stand_ins/`` answers what a
served start would otherwise import only to load a graph."""
