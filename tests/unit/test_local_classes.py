"""A class made inside a function (the `kernels` package's ``Func``, which transformers' Llama calls)
kept in a guarded code's state as the type of a module's global, and found again only where it is
described the same (run/served/local_classes.py, builder/served/dynamo_packaging.py)."""

from __future__ import annotations

import io
import pickle
import sys
import types

import pytest

from hatch_precompile.builder.served import dynamo_packaging
from hatch_precompile.run.served import local_classes
from hatch_precompile.run.torch_internals import patching
from unit.test_served_compiles import hooked_guards_pickler


def wrapped_as_module(func):
    """As `kernels`' ``_create_func_module``: a class made here for ``func``, its instance in its place."""

    class Func:
        can_torch_compile = False

        def forward(self, *args):
            return func(*args)

        @staticmethod
        def condition():
            return True

    return Func()


def double(x):
    return x * 2


def triple(x):
    return x * 3


doubled = wrapped_as_module(double)
THIS = sys.modules[__name__]


def test_a_local_class_is_found_as_the_type_of_a_global_and_told_by_what_it_holds():
    cls = type(doubled)
    assert local_classes.global_of(cls) == (__name__, "doubled")
    assert local_classes.described(cls) == local_classes.described(type(wrapped_as_module(double)))  # made again
    assert local_classes.described(cls) != local_classes.described(type(wrapped_as_module(triple)))  # another function
    assert local_classes.global_of(type(wrapped_as_module(triple))) is None  # no global holds one of it
    assert local_classes.global_of(pytest.MonkeyPatch) is None  # a module's own class: pickle finds it

    class Holding:  # an attribute no new process can tell from another
        table = {"a": 1}

    assert local_classes.described(Holding) is None


def test_the_guards_state_keeps_it_and_a_new_process_finds_the_same_class(monkeypatch):
    cls = type(doubled)
    writer, stream = hooked_guards_pickler(dynamo_packaging.local_class)
    writer.dump(cls)
    assert pickle.loads(stream.getvalue()) is cls  # as torch reads a guards state back
    # The global now holds an object of another class made by the same factory: not the build's class.
    monkeypatch.setattr(THIS, "doubled", wrapped_as_module(triple))
    with pytest.raises(TypeError, match=f"{__name__}.doubled is of wrapped_as_module.<locals>.Func, not the class"):
        pickle.loads(stream.getvalue())
    monkeypatch.setattr(THIS, "doubled", types.SimpleNamespace())
    with pytest.raises(TypeError, match="is of SimpleNamespace"):
        pickle.loads(stream.getvalue())


def test_torch_refuses_only_the_classes_it_cannot_keep():
    assert dynamo_packaging.local_type_kept({"obj": doubled}) is None  # let through: kept as above
    assert dynamo_packaging.local_type_kept({"obj": wrapped_as_module(triple)}) is patching.PASS  # no global
    assert dynamo_packaging.local_type_kept({}) is patching.PASS  # torch's signature unread: torch answers
    assert dynamo_packaging.local_class({"obj": pytest.MonkeyPatch}) is patching.PASS
    assert dynamo_packaging.local_class({"obj": doubled}) is patching.PASS  # an instance: torch's to pickle


def module_wrapping(func):
    """As `kernels` makes it: a module class made here for ``func``."""
    import torch

    class Func(torch.nn.Module):
        def forward(self, *args):
            return func(*args)

    return Func()


def test_a_module_object_of_such_a_class_keeps_its_class_where_torch_keeps_a_plain_module(monkeypatch):
    import torch
    from torch._dynamo import guards

    monkeypatch.setattr(THIS, "rotary", module_wrapping(double), raising=False)
    private = type(THIS.rotary)()  # a model's own instance of the same class, as kernels gives each layer
    private.scale = 3  # read by a guard
    tree = {id(private): private, id(private.scale): private.scale}
    plain = guards.GuardsStatePickler(tree, {}, {}, io.BytesIO())
    assert plain.reducer_override(private)[0].__name__ == "_unpickle_module"  # torch's: a plain torch.nn.Module
    writer, stream = hooked_guards_pickler(dynamo_packaging.local_class, tree)
    writer.dump(private)
    again = pickle.loads(stream.getvalue())
    assert type(again) is type(THIS.rotary) and again.scale == 3  # the class whose methods a guard reads
    assert type(again).forward(again, torch.ones(2)).tolist() == [2.0, 2.0]
    other = module_wrapping(double)  # no guard reads it: left to torch, which keeps a placeholder
    other_writer = guards.GuardsStatePickler({}, {}, {}, io.BytesIO())
    assert dynamo_packaging.local_class({"self": other_writer, "obj": other}) is patching.PASS
