"""The steps route at run: ``load_step`` (``shipped_steps``) runs a step by the route it shipped
with, or its fallback; an exported step runs in AOTInductor's loader with the caller's tensors
(``exported_step``), each call checked against what the step assumed (``call_contract``). Its build
half is builder/steps/."""
