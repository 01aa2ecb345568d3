"""Classes for the pickle oracle test (tests/e2e/test_pickle_oracle.py).

They live in an importable module so that the pickles CPython makes of
them name `pickle_classes.<Class>` and load back in the checking process.
Each one exercises a different way an object reduces itself.
"""
import copyreg


class Plain:
    """Default reduction: copyreg._reconstructor below 2, NEWOBJ + BUILD from 2."""

    def __init__(self, a=None, b=None):
        self.a = a
        self.b = b


class WithReduceEx:
    """__reduce_ex__ returning (callable, args, state, listitems, dictitems)."""

    def __init__(self, x):
        self.x = x
        self.log = []

    def __reduce_ex__(self, protocol):
        return (WithReduceEx, (self.x,), {"log": self.log}, None, None)


class WithNewArgsEx:
    """__getnewargs_ex__: NEWOBJ_EX from 4, copyreg.__newobj_ex__ below."""

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self.args = args
        self.kwargs = kwargs
        return self

    def __getnewargs_ex__(self):
        return self.args, self.kwargs


class WithSetState:
    def __init__(self, value):
        self.value = value

    def __getstate__(self):
        return {"value": self.value, "extra": [self.value, self.value]}

    def __setstate__(self, state):
        self.value = state["value"]
        self.extra = state["extra"]


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


class SlottedWithDict:
    __slots__ = ("a", "__dict__")

    def __init__(self, a, c):
        self.a = a
        self.c = c


def set_state(obj, state):
    obj.__dict__.update(state)
    obj.set_by_setter = True


class WithStateSetter:
    """A 6-tuple reduce: the state goes through a state_setter call."""

    def __init__(self, v):
        self.v = v

    def __reduce__(self):
        return (WithStateSetter.__new__, (WithStateSetter,), {"v": self.v}, None, None, set_state)


class ListSub(list):
    """listitems through APPENDS on a REDUCE result."""

    def __init__(self, *args):
        super().__init__(*args)
        self.tag = "listsub"


class DictSub(dict):
    """dictitems through SETITEMS on a REDUCE result."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.tag = "dictsub"


class Outer:
    class Inner:
        """A dotted qualname: STACK_GLOBAL from 4, getattr(Outer, 'Inner') below."""

        def __init__(self, n):
            self.n = n


class _Singleton:
    def __reduce__(self):
        return "SINGLETON"


SINGLETON = _Singleton()


def module_function(x):
    return x


class HashById:
    """Hashable by identity, for sets of objects whose state points back."""

    def __init__(self):
        self.owner = None


# Every Logged made, loads included: the oracle test counts the calls a
# pickle makes when it loads.
CALLS = []


class Logged:
    """A reducer with a side effect: each call of Logged(items) is logged."""

    def __init__(self, items):
        self.items = items
        CALLS.append(self)

    def __reduce__(self):
        return Logged, (self.items,)


class ExtThing1:
    def __init__(self, v):
        self.v = v


class ExtThing2(ExtThing1):
    pass


class ExtThing4(ExtThing1):
    pass


# Extension codes (EXT1, EXT2, EXT4 from protocol 2); registered in every
# process that imports this module, as copyreg requires.
EXT_CODES = {"ExtThing1": 0xF0, "ExtThing2": 0x1234, "ExtThing4": 0x123456}
for _name, _code in EXT_CODES.items():
    try:
        copyreg.add_extension(__name__, _name, _code)
    except ValueError:
        pass
