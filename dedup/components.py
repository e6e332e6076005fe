"""Connected components of the near-duplicate graph, labelled by their smallest node id.

Deduplication produces candidate pairs (document A resembles document B); the clusters are the
connected components of that graph, and one document per cluster is kept. Label propagation
needs as many rounds as the longest path in a cluster, which for chains of near-duplicates
(each page a small edit of the previous one) is far too many. This module implements the
large-star / small-star alternation of Kiveris et al., "Connected Components in MapReduce and
Beyond" (SoCC 2014), which needs O(log² n) rounds whatever the shape, in plain DataFrame
operations: no Python UDFs and nothing collected to the driver but two counts per round.

Node ids are compared as strings. A round is

    large-star: for each node u, every neighbour v > u is re-attached to
                m(u) = min({u} ∪ N(u))
    small-star: for each node u, every neighbour v < u, and u itself, is re-attached to
                m(u) = min({u} ∪ {v ∈ N(u) : v < u})

State between rounds is the adjacency list: one row per (node, neighbour), both directions of
every edge, distinct, with the per-node figures large-star needs computed by a window over the
node's rows. Building it is one shuffle (by node; the de-duplication rides on the same
partitioning), small-star is a second (a window by the larger end), and large-star is a filter
of the adjacency rows, so a round costs two shuffles and no join.

Self-loops connect nothing and are dropped in the first large-star, except on a node with no
other edge: there the loop is the node's only row and is carried through every round, so
every node of the input reaches the result.

Convergence test. A node is *unsettled* when it has two different smaller neighbours, or a
smaller and a larger one. When no node is, every edge joins a node with no smaller neighbour
(a root) to a node whose only neighbour is that root (a leaf): each component is a star whose
centre is its minimum, m(u) is the component of every node, and both steps would return the
same edge set. That is the fixed point the paper proves the alternation reaches. The test is
sound on its own: it accepts only such a star forest, so a wrong labelling cannot come out,
only the RuntimeError after `max_iterations`. It is also cheap: one aggregate over the cached
adjacency rows (which the next round reads anyway), never a comparison of two edge sets.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

log = logging.getLogger(__name__)

JOB_DESCRIPTION = "dedup: connected components"
_DESCRIPTION_KEY = "spark.job.description"


@dataclass(frozen=True)
class ComponentsResult:
    """`components` has one row per node seen in any edge: `node`, `component` (both strings),
    the component being its smallest node id. It is already materialised (checkpointed), so
    it neither re-reads the input edges nor holds cached frames the caller must release.
    `iterations` is the number of large-star + small-star rounds run, for the job log."""

    components: DataFrame
    iterations: int


def connected_components(
    edges: DataFrame,
    *,
    src: str = "src",
    dst: str = "dst",
    checkpoint_dir: str | None = None,
    checkpoint_every: int = 2,
    max_iterations: int = 50,
) -> ComponentsResult:
    """Connected components of the undirected graph given by the `src`-`dst` pairs of `edges`.

    Ids are compared as strings (other column types are cast), so "10" < "9". Duplicate edges
    and self-loops are harmless; a node whose only edge is a self-loop is its own component.
    A null endpoint is no node: the other end counts as if it had a self-loop. Nodes that
    appear in no edge are not in the result. The input is read once.

    Every `checkpoint_every` rounds the state is checkpointed to cut the query plan, which
    otherwise grows by a round's operators each time: reliably into `checkpoint_dir` when
    given (set as the SparkContext checkpoint directory; survives a lost executor), else with
    `localCheckpoint` (executor storage, cheaper, but a lost executor fails the job). Rounds in
    between are cached, and each round's input is released once its output is materialised.

    Raises RuntimeError when the graph is not settled after `max_iterations` rounds.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
    if max_iterations < 1:
        raise ValueError(f"max_iterations must be at least 1, got {max_iterations}")
    sc = edges.sparkSession.sparkContext
    if checkpoint_dir is not None:
        sc.setCheckpointDir(checkpoint_dir)
    reliable = checkpoint_dir is not None
    caller_description = sc.getLocalProperty(_DESCRIPTION_KEY)
    cache = _Cache()
    try:
        sc.setJobDescription(f"{JOB_DESCRIPTION}, reading edges")
        state = cache.persist(_adjacency(_normalise(edges, src, dst)))
        unsettled = _progress(state, 0)
        iterations = 0
        while unsettled:
            if iterations == max_iterations:
                raise RuntimeError(
                    f"connected components did not converge in {max_iterations} iterations: "
                    f"{unsettled} nodes are not yet attached to their component's minimum; "
                    "raise max_iterations"
                )
            iterations += 1
            sc.setJobDescription(f"{JOB_DESCRIPTION}, iteration {iterations}")
            following = _adjacency(_small_star(_large_star(state)))
            if iterations % checkpoint_every == 0:
                following = _truncate(following, reliable)
            else:
                following = cache.persist(following)
            unsettled = _progress(following, iterations)  # materialises `following`
            cache.release(state)
            state = following

        sc.setJobDescription(f"{JOB_DESCRIPTION}, labels")
        # Settled: m(u) is every node's component; `first` picks one row per node.
        labels = state.where("first").select("node", F.col("low").alias("component"))
        components = _truncate(labels, reliable)
        log.info("%s: converged after %d iterations", JOB_DESCRIPTION, iterations)
        return ComponentsResult(components, iterations)
    finally:
        cache.release_all()
        sc.setLocalProperty(_DESCRIPTION_KEY, caller_description)


def _normalise(edges: DataFrame, src: str, dst: str) -> DataFrame:
    """(lo, hi) pairs, lo <= hi, self-loops kept. least/greatest skip nulls, so (a, null)
    becomes (a, a) and (null, null) is dropped."""
    a, b = F.col(src).cast("string"), F.col(dst).cast("string")
    return edges.select(F.least(a, b).alias("lo"), F.greatest(a, b).alias("hi")).where(
        F.col("lo").isNotNull()
    )


def _adjacency(edges: DataFrame) -> DataFrame:
    """Edges (lo, hi), possibly repeated, as distinct (node, nbr) rows in both directions, with
    the node's figures from a window over its rows:

    low        m(u) = min({u} ∪ N(u))
    first      true on exactly one row per node (the one with the smallest neighbour)
    forward    the row large-star re-attaches: nbr > node, or the self-loop of a node with
               no other edge (carried so the node is not lost)
    unsettled  see the module docstring

    Repartitioning by node first lets both the de-duplication and the window run without
    another shuffle: hash partitioning on `node` satisfies grouping by (node, nbr)."""
    ends = (
        edges.select(
            F.explode(
                F.array(
                    F.struct(F.col("lo").alias("node"), F.col("hi").alias("nbr")),
                    F.struct(F.col("hi").alias("node"), F.col("lo").alias("nbr")),
                )
            ).alias("end")
        )
        .select("end.*")
        .repartition("node")
        .distinct()
    )
    node, nbr = F.col("node"), F.col("nbr")
    by_node = Window.partitionBy("node")
    min_nbr, max_nbr = F.min(nbr).over(by_node), F.max(nbr).over(by_node)
    smaller = F.when(nbr < node, nbr)
    min_smaller, max_smaller = F.min(smaller).over(by_node), F.max(smaller).over(by_node)
    return ends.select(
        node,
        nbr,
        F.least(node, min_nbr).alias("low"),
        (nbr == min_nbr).alias("first"),
        ((nbr > node) | ((min_nbr == node) & (max_nbr == node))).alias("forward"),
        ((min_smaller < max_smaller) | (min_smaller.isNotNull() & (max_nbr > node))).alias(
            "unsettled"
        ),
    )


def _large_star(adjacency: DataFrame) -> DataFrame:
    """Each neighbour v > u becomes (m(u), v); a lone self-loop (u, u) stays (u, u)."""
    return adjacency.where("forward").select(F.col("low").alias("lo"), F.col("nbr").alias("hi"))


def _small_star(edges: DataFrame) -> DataFrame:
    """For each v, with m = min of the lo ends of its rows: each row (u, v) becomes (m, u),
    except the row(s) with u = m, which become (m, v). One row out per row in, so the edge set
    never grows; repeats go in the next adjacency's de-duplication."""
    m = F.min("lo").over(Window.partitionBy("hi"))
    return edges.select(
        m.alias("lo"), F.when(F.col("lo") == m, F.col("hi")).otherwise(F.col("lo")).alias("hi")
    )


def _progress(adjacency: DataFrame, iterations: int) -> int:
    """Unsettled nodes, from one aggregation that also materialises `adjacency`; the edge count
    rides along for the log."""
    row = adjacency.agg(
        F.count_if(F.col("unsettled") & F.col("first")).alias("unsettled"),
        F.count_if(F.col("node") < F.col("nbr")).alias("edges"),
    ).first()
    assert row is not None  # a global aggregate always returns one row
    log.info(
        "%s: %d edges, %d unsettled nodes after %d iterations",
        JOB_DESCRIPTION, row["edges"], row["unsettled"], iterations,
    )
    return int(row["unsettled"])


def _truncate(df: DataFrame, reliable: bool) -> DataFrame:
    """`df` computed once and stored, with its plan cut: into checkpoint files (an eager
    Dataset checkpoint writes as it computes, so no cache is needed in front of it) or into
    executor storage."""
    return df.checkpoint(eager=True) if reliable else df.localCheckpoint(eager=True)


class _Cache:
    """The frames persisted here, so every exit path, the RuntimeError included, leaves
    nothing cached behind."""

    def __init__(self) -> None:
        self._held: list[DataFrame] = []

    def persist(self, df: DataFrame) -> DataFrame:
        df = df.persist()
        self._held.append(df)
        return df

    def release(self, df: DataFrame) -> None:
        """Unpersists `df` if it was persisted here; checkpointed frames are not cached and
        pass through. `is`, not ==: DataFrame == builds a Column."""
        kept = [held for held in self._held if held is not df]
        if len(kept) != len(self._held):
            df.unpersist()
            self._held = kept

    def release_all(self) -> None:
        for df in list(self._held):
            self.release(df)
