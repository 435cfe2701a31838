"""What a trace read of its modules (builder/steps/trace_reads.py), and its check at every call (run/steps/call_contract.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hatch_precompile.builder.steps import trace_reads
from hatch_precompile.run.steps import call_contract


class Config:
    """A transformers-like config: fields, a ``to_dict``, and a name mapped onto another."""

    attribute_map = {"heads": "num_heads"}

    def __init__(self) -> None:
        self.num_heads, self.problem_type, self.logging, self.name_or_path = 2, None, True, "x"

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def to_dict(self) -> dict:
        return dict(vars(self))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = Config()
        self.norm, self.drop, self.bn = nn.LayerNorm(8), nn.Dropout(0.1), nn.BatchNorm1d(8)
        self.scale, self.unused, self.act = 2.0, "never read", torch.relu

    def forward(self, x):
        x = self.drop(self.bn(self.norm(x))) * self.scale
        return self.act(x).view(x.shape[0], self.config.heads, -1)


def recorded(module, x):
    with trace_reads.recording({0: module}) as found, torch.no_grad():
        module(x)
    return found[0]


def test_the_plain_values_a_forward_read_are_recorded_and_nothing_else():
    block = Block().eval()
    found = recorded(block, torch.randn(3, 8))
    assert found == [
        ["", "", "act", "<function torch._VariableFunctionsClass.relu>"],
        ["", "", "scale", "2.0"],
        ["", "config", "heads", "2"],
        ["bn", "", "eps", "1e-05"],  # not momentum: eval() does not use it
        ["norm", "", "eps", "1e-05"],
        ["norm", "", "normalized_shape", "tuple(8)"],
    ]  # not dropout's p, nor a field never read (problem_type, logging), nor `training` or hooks
    assert type(block) is Block and type(block.config) is Config and type(block.norm) is nn.LayerNorm


def test_classes_come_back_when_the_traced_code_raises():
    block = Block().eval()
    with pytest.raises(RuntimeError), trace_reads.recording({0: block}):
        raise RuntimeError("export failed")
    assert type(block) is Block and type(block.config) is Config


def test_a_read_value_changed_is_named_with_both_values_and_an_unread_one_is_not():
    block = Block().eval()
    resolved = call_contract.resolve_reads(block, recorded(block, torch.randn(3, 8)), 0)
    assert call_contract.reads_problem(resolved, 0) is None
    block.config.problem_type, block.config.logging, block.drop.p, block.unused = "multi", False, 0.5, "changed"
    assert call_contract.reads_problem(resolved, 0) is None
    block.config.num_heads = 4  # read through the config's own name map
    assert call_contract.reads_problem(resolved, 0) == "argument 0's config.heads: 2 at build, 4 now"
    block.config.num_heads = 2
    block.norm.eps = 1e-3
    assert call_contract.reads_problem(resolved, 0) == "argument 0's norm.eps: 1e-05 at build, 0.001 now"
    block.norm.eps = 1e-5
    block.config = Config()  # a config object replaced: read through the module again
    block.config.num_heads = 1
    assert call_contract.reads_problem(resolved, 0) == "argument 0's config.heads: 2 at build, 1 now"
    del block.scale
    block.config.num_heads = 2
    assert call_contract.reads_problem(resolved, 0) == "argument 0's scale: 2.0 at build, missing now"


def test_a_submodule_the_export_read_and_the_module_lacks_is_named():
    with pytest.raises(LookupError, match="argument 1 has no submodule 'encoder.0'"):
        call_contract.resolve_reads(nn.Linear(2, 2), [["encoder.0", "", "eps", "1e-05"]], 1)


@pytest.mark.parametrize("value, text", [
    (True, "True"), (1, "1"), (1.0, "1.0"), (None, "None"), ("s", "'s'"), ((1, 2), "tuple(1, 2)"),
    ([1, "a"], "list(1, 'a')"), ({"a": 1}, "{'a': 1}"), (torch.float16, "torch.float16"),
    (torch.device("cpu"), "device(type='cpu')"), (object(), None), (torch.zeros(1), None), (nn.ReLU(), None),
    ((1, object()), None),
])
def test_plain_values_have_a_text_and_others_none(value, text):
    assert call_contract.plain_value_text(value) == text


def test_a_long_value_is_kept_as_its_digest():
    labels = {i: f"label {i}" for i in range(100)}
    text = call_contract.plain_value_text
    assert text(labels).startswith("sha256:")
    assert text(labels) == text(dict(labels)) != text({**labels, 1: "other"})


def test_hooks_are_listed_and_an_added_one_changes_the_keys():
    block = Block()
    dicts = call_contract.hook_dicts(list(block.modules()))
    before = call_contract.hook_keys(dicts)
    assert call_contract.hooks(block) == []
    handle = block.norm.register_forward_hook(lambda *a: None)
    assert call_contract.hook_keys(dicts) != before
    assert call_contract.hooks(block) == [["norm", "forward_hooks", ["test_hooks_are_listed_and_an_added_one_changes_the_keys.<locals>.<lambda>"]]]
    handle.remove()
    assert call_contract.hook_keys(dicts) == before


def test_a_field_the_step_sets_is_given_back_and_may_hold_either_value():
    class Head(nn.Module):  # as transformers' classification heads set problem_type on a first loss
        def __init__(self) -> None:
            super().__init__()
            self.config, self.proj = Config(), nn.Linear(4, 2)

        def forward(self, x):
            if self.config.problem_type is None:
                self.config.problem_type = "single_label_classification"
            return self.proj(x)

    head = Head()
    found = recorded(head, torch.randn(2, 4))
    assert ["", "config", "problem_type", "None", "'single_label_classification'"] in found
    assert head.config.problem_type is None  # the workload's model as it was before the trace
    resolved = call_contract.resolve_reads(head, found, 0)
    assert call_contract.reads_problem(resolved, 0) is None
    head.config.problem_type = "single_label_classification"
    assert call_contract.reads_problem(resolved, 0) is None
    head.config.problem_type = "regression"
    assert call_contract.reads_problem(resolved, 0) == ("argument 0's config.problem_type: None or "
                                                   "'single_label_classification' at build, 'regression' now")
