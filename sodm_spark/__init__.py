"""sodm-spark: Optimal margin Distribution Machines, exact and scalable (SODM) on Spark."""
from .sklearn import ODMClassifier

__all__ = ["ODMClassifier"]
__version__ = "0.1.0"
