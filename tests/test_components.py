"""Connected components on real Spark, each result checked against a union-find on the same
edges. Each run costs a few Spark jobs per iteration, so disjoint hand-built shapes share one
run: components never interact, and each shape is still checked on its own labels."""

from __future__ import annotations

import random

import pytest

from tokenmill.dedup.components import ComponentsResult, connected_components

Edge = tuple[str | None, str | None]


def reference(edges: list[Edge]) -> dict[str, str]:
    """node -> smallest node id of its component, by union-find, with the module's rules for
    self-loops and null endpoints."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges:
        ends = [n for n in (a, b) if n is not None]
        for n in ends:
            parent.setdefault(n, n)
        if len(ends) == 2:
            ra, rb = find(ends[0]), find(ends[1])
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)  # the root stays the minimum
    return {n: find(n) for n in parent}


def run(spark, edges: list[Edge], **kwargs) -> tuple[dict[str, str], ComponentsResult]:
    result = connected_components(spark.createDataFrame(edges, "src string, dst string"), **kwargs)
    rows = result.components.collect()
    labels = {r["node"]: r["component"] for r in rows}
    assert len(labels) == len(rows), "a node appears more than once"
    return labels, result


def chain(n: int = 30, seed: int = 7) -> list[Edge]:
    """A path with the minimum at one end (label propagation's worst case), edges shuffled
    and each given in a random direction."""
    rng = random.Random(seed)
    ids = [f"n{i:02d}" for i in range(n)]
    edges: list[Edge] = [
        (a, b) if rng.random() < 0.5 else (b, a) for a, b in zip(ids, ids[1:], strict=False)
    ]
    rng.shuffle(edges)
    return edges


def random_graph(n_nodes: int, n_edges: int, seed: int) -> list[Edge]:
    rng = random.Random(seed)
    ids = [str(rng.randrange(10**6)) for _ in range(n_nodes)]  # unpadded: string != numeric
    return [(rng.choice(ids), rng.choice(ids)) for _ in range(n_edges)]


def nothing_cached(spark) -> bool:
    return spark._jsparkSession.sharedState().cacheManager().isEmpty()


@pytest.fixture(scope="module")
def chain_local(spark):
    return run(spark, chain())


def test_chain_converges_in_few_iterations(chain_local):
    labels, result = chain_local
    assert labels == reference(chain()) and set(labels.values()) == {"n00"}
    assert 0 < result.iterations < 15
    assert result.components.schema.simpleString() == "struct<node:string,component:string>"


def test_checkpoint_dir_works_as_local_checkpoint(spark, tmp_path, chain_local):
    cp = tmp_path / "checkpoints"
    labels, result = run(spark, chain(), checkpoint_dir=str(cp), checkpoint_every=1)
    assert labels == chain_local[0]
    assert result.iterations == chain_local[1].iterations
    assert any(p.is_file() for p in cp.rglob("*"))
    assert result.components.count() == 30  # read back from the checkpoint files


def test_hand_built_shapes(spark):
    star = [("s50", f"s{i:02d}") for i in range(100) if i != 50]  # centre is not the minimum
    cycle = [(f"c{i:02d}", f"c{(i + 1) % 12:02d}") for i in range(12)]
    triangles = [("t1", "t2"), ("t2", "t3"), ("t3", "t1"), ("u3", "u1"), ("u1", "u2"), ("u2", "u3")]
    pair = [("p2", "p1")]
    messy = [
        ("d1", "d2"), ("d2", "d1"), ("d1", "d2"), ("d2", "d2"), ("d2", "d3"), ("d3", "d3"),
        ("solo", "solo"), ("solo", "solo"),  # only a self-loop: its own component
        ("x", None), (None, None), (None, "y1"), ("y1", "y0"),
    ]
    numeric = [("9", "10"), ("100", "9"), ("2", "9"), ("8", "11"), ("7", "8")]  # "10" < "9"
    rng = random.Random(5)
    ids = [f"w{i}" for i in rng.sample(range(100, 140), 40)]  # a path, minimum inside it
    path = list(zip(ids, ids[1:], strict=False))
    edges = star + cycle + triangles + pair + messy + numeric + path
    rng.shuffle(edges)

    was_empty = nothing_cached(spark)
    labels, result = run(spark, edges)
    if was_empty:  # the result handed back is a checkpoint, not a cache
        assert nothing_cached(spark)

    assert labels == reference(edges)
    assert {labels[n] for n in ("s50", "s00", "s99")} == {"s00"}
    assert {labels[f"c{i:02d}"] for i in range(12)} == {"c00"}
    assert labels["t3"] == "t1" and labels["u3"] == "u1" and labels["p2"] == "p1"
    assert labels["d3"] == "d1" and labels["solo"] == "solo"
    assert labels["x"] == "x" and labels["y1"] == "y0" and None not in labels
    assert labels["2"] == "10" and labels["100"] == "10" and labels["7"] == "11"
    assert {labels[n] for n in ids} == {"w100"}
    assert result.iterations < 15


def test_random_graph(spark):
    edges = random_graph(n_nodes=1500, n_edges=2000, seed=11)
    expected = reference(edges)
    assert len(set(expected.values())) > 10  # a large component and many small ones
    labels, result = run(spark, edges)
    assert labels == expected
    assert result.iterations < 15


def test_degenerate_inputs_and_other_column_types(spark):
    labels, result = run(spark, [("q", "q"), ("p", "p")])
    assert labels == {"q": "q", "p": "p"} and result.iterations == 0
    labels, result = run(spark, [])
    assert labels == {} and result.iterations == 0
    # Integer ids under other column names are compared as strings: "10" < "2" < "9".
    df = spark.createDataFrame([(9, 10), (2, 9)], "a long, b long")
    rows = connected_components(df, src="a", dst="b").components.collect()
    assert {r["node"]: r["component"] for r in rows} == {"9": "10", "10": "10", "2": "10"}


def test_max_iterations_reached_raises_and_cleans_up(spark):
    sc = spark.sparkContext
    was_empty = nothing_cached(spark)
    sc.setJobDescription("dedup: some step")
    try:
        with pytest.raises(RuntimeError, match="did not converge in 1 iterations"):
            run(spark, chain(), max_iterations=1)
        # The caller's own job description is back, and no cached frame is left behind.
        assert sc.getLocalProperty("spark.job.description") == "dedup: some step"
        if was_empty:
            assert nothing_cached(spark)
    finally:
        sc.setLocalProperty("spark.job.description", None)
    with pytest.raises(ValueError, match="checkpoint_every"):
        run(spark, chain(), checkpoint_every=0)
    with pytest.raises(ValueError, match="max_iterations"):
        run(spark, chain(), max_iterations=0)
