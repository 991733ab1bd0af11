"""Instance-weighted SVMs whose solution follows weight changes exactly (Karasuyama, Harada,
Sugiyama and Takeuchi 2012, "Multi-parametric solution-path algorithm for instance-weighted SVMs").

>>> from ratiowatch.core.wsvm import WeightedSVC, WeightedSVR
"""

from .kernels import gamma_from_sigma, kernel_matrix
from .path import PathFollower, PathStats
from .svc import WeightedSVC
from .svr import WeightedSVR

__all__ = ["PathFollower", "PathStats", "WeightedSVC", "WeightedSVR", "gamma_from_sigma", "kernel_matrix"]
