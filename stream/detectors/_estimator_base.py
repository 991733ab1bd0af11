"""Stand-ins for scikit-learn's ``BaseEstimator``, ``OutlierMixin`` and ``NotFittedError``.

scikit-learn is not a runtime dependency. When it is installed the outlier detector subclasses its
real base classes (and passes its estimator checks); without it these minimal versions keep the
same public behaviour: ``get_params`` / ``set_params`` read the constructor's signature,
``fit_predict`` is ``fit(X).predict(X)``, and an unfitted detector raises :class:`NotFittedError`
(a ``ValueError`` and an ``AttributeError``, as in scikit-learn).

Examples
--------
>>> class Toy(BaseEstimator):
...     def __init__(self, a=1, b="x"):
...         self.a, self.b = a, b
>>> Toy(a=2).get_params()
{'a': 2, 'b': 'x'}
"""

from __future__ import annotations

import inspect


class NotFittedError(ValueError, AttributeError):
    """Raised when a method needs a fitted estimator."""


class BaseEstimator:
    """Parameters are the constructor's keyword arguments, stored under the same names."""

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values()
                      if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))

    def get_params(self, deep: bool = True) -> dict:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        valid = set(self._param_names())
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {sorted(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"


class OutlierMixin:
    """``fit_predict(X) = fit(X).predict(X)``."""

    def fit_predict(self, X, y=None):
        return self.fit(X, y).predict(X)
