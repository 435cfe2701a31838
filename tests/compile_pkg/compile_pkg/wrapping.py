"""Decorators from another module than the functions they wrap, as transformers' ``forward`` has
them: ``functools.wraps`` gives the wrapper the wrapped function's module and name, while its code
runs with this module's globals."""

import functools

CALLS = {"count": 0}  # a global of this module, which the wrapper reads: guards on it read these globals


def counted(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        CALLS["count"] += 1
        CALLS["last"] = fn.__name__  # read by name, as transformers' wrappers read it: a guard on it
        return fn(*args, **kwargs)

    return wrapper


def scaled_output(factor):
    def decorate(fn):
        @functools.wraps(fn)
        def scaled(*args, **kwargs):
            return fn(*args, **kwargs) * factor

        return scaled

    return decorate
