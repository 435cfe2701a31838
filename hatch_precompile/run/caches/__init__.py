"""The caches route at run: a chosen set's graphs and kernels written into Inductor's cache dir
(``cache_install``, ``relocate``), this process's cache keys made as the build made them
(``cache_keys_as_built``), what will miss said early (``foreseen_misses``), and the work a built
kernel does not need skipped (``warm_shortcuts``, ``isa_probes``; on a GPU, ``tuned_configs`` and
``triton_modules``). Its build half is builder/caches/."""
