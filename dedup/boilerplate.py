"""Boilerplate lines: a normalised line that occurs in very many documents (cookie banners,
templates, "All rights reserved") carries no information and makes unrelated pages look alike,
so it is removed from every text before hashing. Native Spark only: lines are exploded,
counted per distinct document, and the texts reassembled in their original order."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F


def line_key(line: Column) -> Column:
    """Lowercase, whitespace collapsed and trimmed: the same banner with other spacing is the
    same line."""
    return F.trim(F.lower(F.regexp_replace(line, r"\s+", " ")))


def frequent_lines(docs: DataFrame, min_docs: int, min_chars: int) -> DataFrame:
    """(key, docs) for every normalised line found in more than `min_docs` documents."""
    lines = docs.select("doc_id", F.explode(F.split("text", "\n")).alias("line"))
    return (
        lines.select("doc_id", line_key(F.col("line")).alias("key"))
        .where(F.length("key") >= max(1, min_chars))
        .distinct()
        .groupBy("key")
        .agg(F.count("*").alias("docs"))
        .where(F.col("docs") > min_docs)
    )


def remove_boilerplate(docs: DataFrame, min_docs: int, min_chars: int) -> DataFrame:
    """`docs` with frequent lines removed from `text` and their number in
    `boilerplate_lines`; documents without any such line keep their text unchanged."""
    frequent = frequent_lines(docs, min_docs, min_chars).select(
        "key", F.lit(True).alias("boiler")
    )
    lines = docs.select("doc_id", F.posexplode(F.split("text", "\n")).alias("pos", "line"))
    marked = lines.withColumn("key", line_key(F.col("line"))).join(frequent, "key", "left")
    touched = (
        marked.groupBy("doc_id")
        .agg(
            F.sum(F.col("boiler").isNotNull().cast("int")).alias("boilerplate_lines"),
            # collect_list skips nulls, so boilerplate lines drop out; sorting the structs
            # by position restores the line order.
            F.array_sort(
                F.collect_list(F.when(F.col("boiler").isNull(), F.struct("pos", "line")))
            ).alias("kept"),
        )
        .where("boilerplate_lines > 0")
        .select(
            "doc_id",
            "boilerplate_lines",
            F.array_join(F.transform("kept", lambda x: x["line"]), "\n").alias("new_text"),
        )
    )
    return (
        docs.join(touched, "doc_id", "left")
        .withColumn("text", F.coalesce("new_text", "text"))
        .withColumn("boilerplate_lines", F.coalesce("boilerplate_lines", F.lit(0)))
        .drop("new_text")
    )
