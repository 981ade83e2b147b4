"""Every exported error names the package users import it from, and survives pickling.

A traceback shows ``aioclients.jetstream.JetStreamConnectError``, not the private module
that defines the class; Spark pickles errors between its processes, so each must come
back whole under that name.
"""

from __future__ import annotations

import importlib
import importlib.util
import pickle
import pkgutil
from collections.abc import Iterator

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


def _subclasses(cls: type[BaseException]) -> Iterator[type[BaseException]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_error_of_the_library_is_a_public_one() -> None:
    """A user meets any ``AioClientsError`` in a traceback or an ``except``, not only
    those in ``__all__``: each must be named by a public package, where pickle (Spark
    ships errors between processes) finds it too, never by a private module."""
    import aioclients

    # Every module of the package, so that an error defined deep inside is seen too.
    optional = {"aioclients.spark": "pyspark", "aioclients.telemetry": "opentelemetry"}
    for module in pkgutil.walk_packages(aioclients.__path__, "aioclients."):
        needs = [dep for pkg, dep in optional.items() if module.name.startswith(pkg)]
        if all(importlib.util.find_spec(dep) for dep in needs):
            importlib.import_module(module.name)
    private = []
    for cls in set(_subclasses(aioclients.AioClientsError)):
        public = importlib.import_module(cls.__module__)
        if "._" in cls.__module__ or getattr(public, cls.__qualname__, None) is not cls:
            private.append(f"{cls.__module__}.{cls.__qualname__}")
    assert sorted(private) == []
