"""What every error of the package promises a caller: it pickles whole."""

from __future__ import annotations

import pickle

#: The structured attributes an error may carry; each must survive a pickle.
ATTRIBUTES = ("namespace", "key", "path", "errno", "hrm", "size")


def assert_pickles(err: BaseException) -> None:
    """``err`` crosses a process boundary unchanged: same type, message,
    ``__dict__`` and structured attributes."""
    clone = pickle.loads(pickle.dumps(err))
    assert type(clone) is type(err)
    assert str(clone) == str(err)
    assert clone.__dict__ == err.__dict__
    for attr in ATTRIBUTES:
        if hasattr(err, attr):
            assert getattr(clone, attr) == getattr(err, attr), attr
