"""Every exported error names the package users import it from, and survives pickling.

A traceback shows ``aioclients.jetstream.JetStreamConnectError``, not the private module
that defines the class; Spark pickles errors between its processes, so each must come
back whole under that name.
"""

from __future__ import annotations

import importlib
import pickle

import pytest

PACKAGES = [
    "aioclients",
    "aioclients.jetstream",
    "aioclients.liftbridge",
    "aioclients.nsq",
    "aioclients.spark",
]


def _exported_errors() -> list[tuple[str, type[BaseException]]]:
    found = []
    for name in PACKAGES:
        if name == "aioclients.spark":
            pytest.importorskip("pyspark")
        package = importlib.import_module(name)
        for attr in package.__all__:
            obj = getattr(package, attr)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                found.append((name, obj))
    return found


ERRORS = _exported_errors()


def test_every_package_exports_errors() -> None:
    assert {package for package, _ in ERRORS} == set(PACKAGES)


@pytest.mark.parametrize(("package", "cls"), ERRORS, ids=lambda v: getattr(v, "__name__", v))
def test_error_names_its_public_module(package: str, cls: type[BaseException]) -> None:
    # Its own package's name, or that of the public package a shared family comes from.
    assert cls.__module__ in PACKAGES, cls.__module__
    assert cls.__module__ == package or package == "aioclients" or cls.__module__ == "aioclients"
    public = importlib.import_module(cls.__module__)
    assert getattr(public, cls.__qualname__) is cls


@pytest.mark.parametrize(("package", "cls"), ERRORS, ids=lambda v: getattr(v, "__name__", v))
@pytest.mark.parametrize("protocol", [2, pickle.HIGHEST_PROTOCOL])
def test_error_pickles_round_trip(package: str, cls: type[BaseException], protocol: int) -> None:
    error = cls("E_BAD_TOPIC") if cls.__name__ == "NSQError" else cls("it broke")
    back = pickle.loads(pickle.dumps(error, protocol=protocol))
    assert type(back) is cls
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)


def test_traceback_shows_the_public_name() -> None:
    from aioclients.jetstream import JetStreamConnectError

    assert f"{JetStreamConnectError.__module__}.{JetStreamConnectError.__qualname__}" == (
        "aioclients.jetstream.JetStreamConnectError"
    )
