"""Benchmark subsetting after seed 003 §3.4: cluster the workloads by their
standardized features (agglomerative, Ward linkage), take from each cluster
the workload nearest its centre, and score the subset two ways:

- accuracy: RMSE of a non-negative, sum-to-one linear regression from the
  subset's features to the mean features of the whole set;
- representativeness: RMSE of each workload's distance to the nearest
  workload of the subset.

k is the point of diminishing return of the representativeness curve (the
point farthest below the straight line from k = 1 to k = n - 1).
"""
import numpy as np
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import nnls


def standardize(features: np.ndarray) -> np.ndarray:
    """Columns to zero mean and unit variance; constant columns are dropped
    (they cannot tell workloads apart)."""
    std = features.std(axis=0)
    keep = std > 1e-12
    return (features[:, keep] - features[:, keep].mean(axis=0)) / std[keep]


def representatives(z: np.ndarray, k: int) -> list:
    """Row indices of the k workloads chosen by Ward clustering."""
    n = len(z)
    if k >= n:
        return list(range(n))
    labels = fcluster(linkage(z, method="ward"), k, criterion="maxclust")
    chosen = []
    for c in sorted(set(labels)):
        members = np.flatnonzero(labels == c)
        centre = z[members].mean(axis=0)
        chosen.append(int(members[np.argmin(((z[members] - centre) ** 2).sum(axis=1))]))
    return sorted(chosen)


def accuracy_rmse(z: np.ndarray, chosen: list, sum_weight: float = 10.0):
    """RMSE of the non-negative regression of the whole set's mean features
    on the chosen workloads' features, weights pushed to sum to one (seed 003
    adds copies of that equation; one row weighted as heavily does the same).
    Returns (rmse, weights)."""
    target = z.mean(axis=0)
    a = z[chosen].T
    a_aug = np.vstack([a, sum_weight * np.ones(len(chosen))])
    b_aug = np.concatenate([target, [sum_weight]])
    weights, _ = nnls(a_aug, b_aug)
    residual = a @ weights - target
    return float(np.sqrt((residual ** 2).mean())), weights


def representativeness_rmse(z: np.ndarray, chosen: list) -> float:
    d = np.sqrt(((z[:, None, :] - z[None, chosen, :]) ** 2).sum(axis=2)).min(axis=1)
    return float(np.sqrt((d ** 2).mean()))


def knee(values: list) -> int:
    """Index of the point farthest below the chord from first to last."""
    if len(values) < 3:
        return len(values) - 1
    x = np.arange(len(values), dtype=float)
    y = np.asarray(values, dtype=float)
    chord = y[0] + (y[-1] - y[0]) * x / x[-1]
    return int(np.argmax(chord - y))


def choose(names: list, features: np.ndarray, max_k: int = None) -> dict:
    """Sweeps k, picks the knee, and returns the subset with its scores and
    the standardized features it was chosen from (for the picture)."""
    z = standardize(np.asarray(features, dtype=float))
    n = len(names)
    if n < 2 or z.shape[1] == 0:
        raise ValueError("subsetting needs at least two workloads that differ")
    ks = list(range(1, min(n - 1, max_k or n - 1) + 1)) or [1]
    sweep = []
    for k in ks:
        chosen = representatives(z, k)
        acc, weights = accuracy_rmse(z, chosen)
        sweep.append({"k": k, "subset": [names[i] for i in chosen], "accuracy_rmse": acc,
                      "representativeness_rmse": representativeness_rmse(z, chosen),
                      "weights": [float(w) for w in weights]})
    best = sweep[knee([s["representativeness_rmse"] for s in sweep])]
    return {"chosen": best, "sweep": sweep, "features": int(z.shape[1]), "standardized": z}
