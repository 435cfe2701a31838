"""The artifact set, as every route ships it: each run laid out by sha256 with its manifest
(``artifact_layout``), what its native code needs of the machine (``elf``: libraries and symbol
versions; ``isa``: CPU features from the flags each compile used), and the wheel tag those allow
(``wheel_tag``). The run side's half, which set may be used here, is run/sets/."""
