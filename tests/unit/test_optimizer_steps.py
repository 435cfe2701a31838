"""A compiled optimizer step, in-process: the build's second pass unguards only the optimizer's static
marks and records its trace's ``_init_group`` calls; the run side holds an optimizer by its class and
makes the state the trace made, once per optimizer, before the guards that hold it (a real build
and fresh processes: tests/integration/test_served_compiles.py)."""

from __future__ import annotations

import types

import pytest
import torch

from hatch_precompile.builder.served import compile_recorder, optimizer_steps
from hatch_precompile.protocol import dynamo_sources
from hatch_precompile.run.served import held_objects, optimizer_state

ADAM_INIT = [[{"group": 0}] + [{"list": []}] * 6]  # Adam._init_group(group, 6 lists), as Dynamo calls it


def _trained(make=torch.optim.Adam, grads=True):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optimizer = make(model.parameters(), lr=0.1)
    if grads:
        model(torch.randn(3, 4)).sum().backward()
    return model, optimizer


def _held(init=ADAM_INIT):
    guard = {"source": "L['optimizer']", "type": "ID_MATCH", "code": False,
             "described": dynamo_sources.describe(torch.optim.Adam([torch.zeros(1, requires_grad=True)])),
             "init": init}
    check, count = held_objects.held([guard], {})
    assert count == 1
    return check


def test_an_optimizer_is_described_by_its_class_and_nothing_holding_one_is():
    _, adam = _trained()
    assert dynamo_sources.describe(adam) == {"kind": dynamo_sources.OPTIMIZER, "class": {
        "kind": "class", "module": "torch.optim.adam", "qualname": "Adam", "meta": "type"}}
    assert dynamo_sources.describe((adam,)) is None  # inside a tuple, a closure: an instance, as before
    assert dynamo_sources.describe(torch.optim.Adam) == {"kind": "class", "module": "torch.optim.adam",
                                                         "qualname": "Adam", "meta": "type"}
    assert not dynamo_sources.is_optimizer(torch.optim.Adam) and not dynamo_sources.is_optimizer(object())


def test_a_held_optimizer_gets_the_state_its_trace_made_once_and_by_its_class_only():
    check = _held()
    _, adam = _trained()
    assert not adam.state
    assert check({"optimizer": adam})
    assert len(adam.state) == 2 and set(adam.state[next(iter(adam.state))]) == {"step", "exp_avg", "exp_avg_sq"}
    _, other = _trained()  # another Adam: held too (its class), its state made as a trace would make it
    assert check({"optimizer": other}) and len(other.state) == 2
    _, sgd = _trained(torch.optim.SGD)
    assert not check({"optimizer": sgd}) and not sgd.state  # another class: traced, nothing made
    adam.state.clear()  # a state cleared after its first call: the guards then fail, and torch's trace makes it
    assert check({"optimizer": adam}) and not adam.state
    model, untrained = _trained(grads=False)  # no gradients yet: no state, as the trace makes none
    assert check({"optimizer": untrained}) and not untrained.state
    model(torch.randn(3, 4)).sum().backward()
    assert check({"optimizer": untrained}) and len(untrained.state) == 2  # the first call with them makes it


def test_a_state_that_cannot_be_made_fails_the_guard_and_is_tried_again(monkeypatch):
    check = _held()
    _, adam = _trained()
    monkeypatch.setattr(torch.optim.Adam, "_init_group", lambda self, *args: (_ for _ in ()).throw(RuntimeError("no")))
    assert not check({"optimizer": adam})  # traced: torch's own trace makes the state
    monkeypatch.undo()
    assert check({"optimizer": adam}) and len(adam.state) == 2
    _, other = _trained()
    assert not _held([[{"group": 3}]])({"optimizer": other})  # a group the optimizer does not have


def test_a_loaded_step_is_moved_to_its_parameter_and_a_gpu_group_made_capturable_as_dynamo_does():
    on_meta = torch.zeros(2, device="meta")  # a parameter on another device than its loaded `step`
    loaded = types.SimpleNamespace(param_groups=[{"params": [on_meta], "capturable": False}],
                                   state={on_meta: {"step": torch.tensor(3.0)}})
    optimizer_state._step_on_its_device(loaded)
    assert loaded.state[on_meta]["step"].device == torch.device("meta")
    gpu = type("CudaParameter", (), {"is_cuda": True, "is_xpu": False})()  # as a CUDA parameter answers
    fresh = types.SimpleNamespace(param_groups=[{"params": [gpu], "capturable": False}, {"params": [gpu]}], state={})
    optimizer_state._capturable(fresh)
    assert fresh.param_groups[0]["capturable"] is True and "capturable" not in fresh.param_groups[1]
    stepped = types.SimpleNamespace(param_groups=[{"params": [gpu], "capturable": False}], state={gpu: {}})
    optimizer_state._capturable(stepped)  # a state already: left as it is, as Dynamo leaves it
    assert stepped.param_groups[0]["capturable"] is False
    _, adam = _trained()  # on the CPU: neither changes anything
    adam.step()
    assert optimizer_state.made(adam, ADAM_INIT) and adam.param_groups[0]["capturable"] is False
    assert {s["step"].device for s in adam.state.values()} == {torch.device("cpu")}


def test_the_second_pass_unguards_the_optimizers_static_marks_only():
    namespace = {"__name__": "torch._dynamo.variables.optimizer", "unguarded": optimizer_steps._unguarded}
    exec("def mark(arguments):\n    return unguarded(arguments)\n", namespace)
    assert namespace["mark"]({"t": None, "guard": True}) == {"guard": False}
    assert namespace["mark"]({"t": None, "guard": False}) is None
    assert optimizer_steps._unguarded({"t": None, "guard": True}) is None  # anyone else's mark: as it was


def test_hooks_that_read_no_arguments_leave_torchs_marks_and_say_why_nothing_was_recorded():
    # a torch whose functions' signatures cannot be read: the hooks get no arguments (run/torch_internals/patching.py)
    assert optimizer_steps._unguarded({}) is None  # the mark as torch makes it: the step bypassed, and named
    steps = optimizer_steps.OptimizerSteps()
    steps._init_args({}, None)
    calls, why = steps.taken()
    assert calls == {} and why.startswith("its trace's call of the optimizer's _init_group is not recorded (")


def test_the_init_calls_a_trace_made_are_recorded_by_the_optimizers_source():
    _, adam = _trained()
    steps = optimizer_steps.OptimizerSteps()
    variable = type("OptimizerVariable", (), {"value": adam, "source": type("S", (), {"name": "L['self']"})()})()
    for _ in range(2):  # a trace that restarts calls it again: recorded once
        steps._init_args({"self": variable}, ([adam.param_groups[0], [], [], False], {}))
    assert steps.taken() == ({"L['self']": [[{"group": 0}, {"list": []}, {"list": []}, {"value": False}]]}, None)
    assert steps.taken() == ({}, None)  # forgotten once taken
    steps._init_args({"self": variable}, ([adam.param_groups[0], [torch.zeros(1)]], {}))
    calls, why = steps.taken()
    assert calls == {} and why == "its trace's call of the optimizer's _init_group is not recorded (an argument of type list)"
    steps._init_args({"self": variable}, ([adam.param_groups[0]], {"amsgrad": False}))
    assert steps.taken()[1] == "its trace called the optimizer's _init_group by keyword or from no source"


@pytest.mark.parametrize("value, described", [(None, {"value": None}), (2.5, {"value": 2.5}), ([], {"list": []})])
def test_an_argument_is_described_as_the_run_side_makes_it_again(value, described):
    _, adam = _trained()
    assert optimizer_steps._argument(adam, value) == described
    assert optimizer_state._argument(adam, described) == value


def test_two_compiles_saving_the_same_guards_held_to_other_objects_are_neither_served():
    adam = {"held": [{"source": "L['optimizer']", "described": {"kind": "optimizer", "class": "Adam"}}], "reads": []}
    sgd = {"held": [{"source": "L['optimizer']", "described": {"kind": "optimizer", "class": "SGD"}}], "reads": []}
    assert compile_recorder.one_record(None, adam) is adam
    assert compile_recorder.one_record(adam, dict(adam)) == adam  # the same again (two Adams): served
    assert compile_recorder.one_record(adam, sgd).startswith("another compile of it saved the same guards")
    assert compile_recorder.one_record("a reason", adam) == "a reason"  # the first could not be served: neither is
