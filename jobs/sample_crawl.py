"""Seeded generator of a small Common-Crawl-style sample crawl with labelled faults.

The pipeline's ingest, cleaning, dedup and PII stages are tested against this crawl. Every
response record is labelled with what it is (``kind``) and what ingest must do with it
(``expected_ingest``: "kept" or the drop reason), so a test can compare the pipeline's output
with the truth record by record. The files look like Common Crawl's: WARC/1.0, one gzip member
per record, a warcinfo record first, then request/response/metadata per fetched page.

Everything comes from one ``random.Random(seed)``: the same arguments give byte-identical files.

    python -m tokenmill.jobs.sample_crawl --out DIR [--files 3] [--pages-per-file 60] [--seed 7]
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import html
import json
import random
import sys
import unicodedata
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tokenmill.udfs.ids import doc_id_from_record_id
from tokenmill.udfs.minhash import word_shingles as minhash_shingles
from tokenmill.udfs.text import normalise_for_dedup

CRAWL_NAME = "CC-MAIN-SAMPLE"
LABELS_FILE = "labels.jsonl"
SUMMARY_FILE = "labels-summary.json"

# What ingest must do with each response record. "kept" means it becomes a document; every
# other value is the exact reason string the ingest job writes to its rejections table.
KEPT = "kept"
HTTP_STATUS = "http_status"
NOT_HTML = "not_html"
BAD_HTTP = "bad_http"
TOO_LARGE = "too_large"
UNDECODABLE = "undecodable"
EMPTY_TEXT = "empty_text"
TRUNCATED_RECORD = "truncated_record"
CORRUPT_RECORD = "corrupt_record"
INGEST_REASONS = (
    HTTP_STATUS,
    NOT_HTML,
    BAD_HTTP,
    TOO_LARGE,
    UNDECODABLE,
    EMPTY_TEXT,
    TRUNCATED_RECORD,
    CORRUPT_RECORD,
)

# Similarity levels of the planted near-duplicates, one copy each per file, in this order.
NEAR_DUPLICATE_TARGETS = (0.95, 0.85, 0.7, 0.5)

LANGS = ("en", "de", "fr", "es", "ru", "zh")
_LANG_WEIGHTS = (60, 8, 8, 8, 8, 8)

# gzip level is fixed so the bytes never depend on a library default.
_GZIP_LEVEL = 6
_PAGE_TYPES = ("request", "response", "metadata")


# --------------------------------------------------------------------------------------------
# Shingles: the same definition the dedup stage uses, so labels carry comparable numbers.
# --------------------------------------------------------------------------------------------


def normalise_for_shingles(text: str) -> str:
    """The dedup stage's normalisation (lowercase, no diacritics, digits → 0, punctuation →
    space, whitespace collapsed)."""
    return normalise_for_dedup(text)


def word_shingles(text: str, n: int = 5) -> set[str]:
    """The dedup stage's word n-gram shingles, as a set."""
    return set(minhash_shingles(text, n))


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets are identical."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


# --------------------------------------------------------------------------------------------
# Vocabulary. Small hand-written grammars per language: enough words that independent
# articles share almost no word 5-grams, and function words in the right places so that a
# stop-word based quality filter sees ordinary prose.
# --------------------------------------------------------------------------------------------

_EN_NOUNS = """harbour bridge village market library garden river council festival bakery orchard
museum station valley school workshop kitchen ferry lighthouse meadow theatre factory hospital
stadium gallery tram mill farm clinic forest island pier square chapel warehouse cottage canal
orchestra newspaper committee bicycle tunnel reservoir greenhouse vineyard quarry airport highway
playground laboratory bookshop restaurant cathedral courthouse studio harvest roof fence road
ridge storm boathouse allotment footpath barn signal timetable fountain""".split()
_EN_PEOPLE = """neighbour teacher fisherman carpenter baker gardener volunteer mayor engineer nurse
farmer student driver painter architect historian ranger shepherd tailor miner pilot
librarian""".split()
_EN_ADJ = """old new quiet busy narrow wide wooden stone northern southern eastern western local
small large bright dark empty crowded famous modest ancient modern careful patient cheerful tired
young rural coastal steep gentle heavy early late public private seasonal colourful muddy frozen
sunny windy rainy green red golden silver simple sturdy""".split()
_EN_VT = """repaired opened painted visited described inspected rebuilt measured photographed
cleaned closed designed planned announced explored mapped delivered collected decorated protected
restored crossed watched reported recorded organised welcomed praised replaced expanded supported
purchased borrowed carried planted harvested tested discussed studied celebrated renovated guarded
surveyed shared sketched""".split()
_EN_VI = """waited arrived stayed returned worked gathered paused travelled argued laughed walked
rested listened complained hesitated volunteered spoke settled lingered""".split()
_EN_ADV = """quietly slowly quickly carefully finally again yesterday recently often rarely briefly
later together happily suddenly patiently gradually eventually openly gladly loudly""".split()
_EN_PREP = """of to with near behind across under beside after before around along inside beyond
through for from above towards""".split()
_EN_DET = ["the", "the", "the", "this", "that", "every", "our", "their", "each"]
_EN_CONJ = ["and", "but", "because", "while", "although", "so", "when", "since"]
_EN_OPENERS = [
    "Last week,",
    "On Monday morning,",
    "Early in the season,",
    "After the long winter,",
    "By the evening,",
    "In the afternoon,",
    "Without much fuss,",
    "Later that day,",
    "According to the council,",
    "For the first time,",
]
_EN_WORDS = _EN_NOUNS + _EN_PEOPLE + _EN_ADJ + _EN_VT + _EN_VI + _EN_ADV

_DE_NOUNS = [
    (w, g)
    for g, ws in (
        (
            "m",
            "Bahnhof Markt Garten Fluss Gemeinderat Leuchtturm Hof Wald Platz Kanal Ausschuss "
            "Tunnel Stausee Weinberg Steinbruch Flughafen Spielplatz Dom Zaun Weg Gipfel Keller "
            "Brunnen Schuppen Acker Hafen Turm Wochenmarkt Fahrplan Obstgarten",
        ),
        (
            "f",
            "Brücke Bibliothek Bäckerei Schule Werkstatt Küche Fähre Wiese Fabrik Galerie "
            "Straßenbahn Mühle Insel Kapelle Lagerhalle Hütte Zeitung Buchhandlung Ernte Scheune "
            "Kirche Schleuse Gärtnerei Sternwarte Almhütte",
        ),
        (
            "n",
            "Dorf Fest Museum Tal Theater Krankenhaus Stadion Fahrrad Gewächshaus Labor Gasthaus "
            "Rathaus Atelier Dach Gewitter Ufer Freibad Stellwerk Kraftwerk Schwimmbad",
        ),
    )
    for w in ws.split()
]
_DE_PEOPLE = [
    (w, g)
    for g, ws in (
        ("m", "Fischer Tischler Bäcker Förster Fahrer Schäfer Müller Imker Bürgermeister"),
        ("f", "Lehrerin Gärtnerin Bürgermeisterin Pflegerin Bäuerin Studentin Malerin Nachbarin"),
    )
    for w in ws.split()
]
_DE_ADJ = """alt neu ruhig schmal breit steinern hölzern nördlich südlich klein groß hell leer
berühmt bescheiden modern sorgfältig geduldig fröhlich müde jung ländlich steil sanft schwer
leicht früh spät öffentlich privat bunt matschig gefroren sonnig windig regnerisch grün rot golden
schlicht stabil glücklich gemütlich weit kühl warm still frisch lang kurz schön prächtig""".split()
_DE_VT = """reparierte öffnete strich besuchte beschrieb prüfte baute vermaß fotografierte reinigte
schloss entwarf plante erkundete lieferte sammelte schmückte schützte restaurierte überquerte
beobachtete meldete organisierte begrüßte lobte ersetzte erweiterte unterstützte kaufte trug
pflanzte erntete testete untersuchte feierte renovierte bewachte zeichnete teilte räumte""".split()
_DE_VI = """wartete blieb arbeitete zögerte lachte schwieg wanderte ruhte staunte übernachtete
""".split()
_DE_ADV = """gestern heute langsam schnell leise endlich wieder später gemeinsam plötzlich draußen
damals kürzlich oft selten kaum gern überraschend pünktlich""".split()
_DE_PREP = "mit bei von aus neben hinter vor unter nach seit".split()
_DE_CONJ = ["und", "aber", "denn", "doch", "oder"]
_DE_OPENERS = [
    "Am Montag",
    "Im Frühling",
    "Gestern Abend",
    "Nach dem Regen",
    "Am Wochenende",
    "Im Herbst",
    "Zum ersten Mal",
    "Bereits am Morgen",
]
# Article forms per case and gender; weak adjective endings follow from the case.
_DE_ART = {
    "der": {
        "nom": ("der", "die", "das"),
        "acc": ("den", "die", "das"),
        "dat": ("dem", "der", "dem"),
    },
    "dieser": {
        "nom": ("dieser", "diese", "dieses"),
        "acc": ("diesen", "diese", "dieses"),
        "dat": ("diesem", "dieser", "diesem"),
    },
}

_FR_NOUNS = [
    (w, g)
    for g, ws in (
        (
            "m",
            "marché pont village jardin conseil festival verger musée port phare théâtre stade "
            "tramway moulin canal journal comité vélo tunnel vignoble parc laboratoire restaurant "
            "tribunal toit bateau quai quartier lavoir sentier",
        ),
        (
            "f",
            "bibliothèque rivière boulangerie gare vallée cuisine prairie galerie ferme clinique "
            "forêt place chapelle cabane serre carrière librairie cathédrale clôture route colline "
            "tempête saison fontaine maison boutique rue récolte mairie digue",
        ),
    )
    for w in ws.split()
]
_FR_PEOPLE = [
    (w, g)
    for g, ws in (
        ("m", "boulanger pêcheur menuisier maire peintre musicien facteur berger"),
        ("f", "jardinière voisine directrice conductrice bibliothécaire fermière couturière"),
    )
    for w in ws.split()
]
_FR_ADJ = [
    tuple(p.split("/"))
    for p in """calme/calme étroit/étroite large/large célèbre/célèbre modeste/modeste
moderne/moderne joyeux/joyeuse rural/rurale côtier/côtière raide/raide lourd/lourde léger/légère
public/publique privé/privée coloré/colorée boueux/boueuse gelé/gelée ensoleillé/ensoleillée
venteux/venteuse vert/verte rouge/rouge doré/dorée simple/simple solide/solide
tranquille/tranquille immense/immense sombre/sombre lumineux/lumineuse vide/vide
bruyant/bruyante fragile/fragile discret/discrète humide/humide chaleureux/chaleureuse
patient/patiente fatigué/fatiguée municipal/municipale régional/régionale""".split()
]
_FR_VT = """répare ouvre peint visite décrit inspecte reconstruit mesure photographie nettoie ferme
dessine prépare annonce explore livre décore protège restaure traverse observe signale organise
accueille remplace agrandit soutient achète emprunte porte plante récolte teste étudie célèbre
rénove surveille partage""".split()
_FR_VI = "attend arrive reste travaille hésite marche patiente revient passe discute".split()
_FR_ADV = """hier lentement rapidement doucement enfin encore souvent rarement ensemble soudain
patiemment toujours déjà tard tôt volontiers discrètement longuement prudemment""".split()
_FR_PREP = "dans avec sous pour sur devant derrière après avant contre vers".split()
_FR_DET = {"m": ["le", "le", "ce", "chaque", "notre", "un"], "f": ["la", "la", "cette", "chaque",
                                                              "notre", "une"]}
_FR_CONJ = ["et", "mais", "car", "donc", "puis"]
_FR_OPENERS = ["Lundi matin,", "Au printemps,", "Hier soir,", "Après la pluie,", "Cette semaine,",
               "Pour la première fois,", "Dès le matin,"]

_ES_NOUNS = [
    (w, g)
    for g, ws in (
        (
            "m",
            "mercado puente pueblo jardín río consejo festival huerto museo valle taller puerto "
            "faro teatro hospital estadio tranvía molino bosque muelle almacén canal periódico "
            "comité túnel embalse invernadero viñedo parque laboratorio restaurante tejado camino "
            "barco barrio",
        ),
        (
            "f",
            "biblioteca panadería estación escuela cocina pradera fábrica galería granja clínica "
            "isla plaza capilla cabaña bicicleta cantera librería catedral valla colina tormenta "
            "cosecha fuente casa tienda calle ermita",
        ),
    )
    for w in ws.split()
]
_ES_PEOPLE = [
    (w, g)
    for g, ws in (
        ("m", "panadero pescador carpintero pintor granjero músico cartero pastor"),
        ("f", "jardinera alcaldesa vecina maestra conductora bibliotecaria enfermera"),
    )
    for w in ws.split()
]
_ES_ADJ = [
    tuple(p.split("/"))
    for p in """viejo/vieja nuevo/nueva tranquilo/tranquila estrecho/estrecha ancho/ancha
famoso/famosa modesto/modesta moderno/moderna alegre/alegre rural/rural costero/costera
empinado/empinada pesado/pesada ligero/ligera público/pública privado/privada colorido/colorida
helado/helada soleado/soleada verde/verde rojo/roja dorado/dorada sencillo/sencilla
sólido/sólida enorme/enorme oscuro/oscura luminoso/luminosa vacío/vacía ruidoso/ruidosa
frágil/frágil húmedo/húmeda cálido/cálida paciente/paciente cansado/cansada
municipal/municipal antiguo/antigua pequeño/pequeña lluvioso/lluviosa amable/amable
limpio/limpia""".split()
]
_ES_VT = """repara abre pinta visita describe inspecciona reconstruye mide fotografía limpia cierra
diseña prepara anuncia explora entrega recoge decora protege restaura cruza observa organiza
recibe sustituye amplía apoya compra lleva planta cosecha prueba estudia celebra renueva vigila
comparte dibuja construye""".split()
_ES_VI = "espera llega trabaja descansa camina duda vuelve habla sonríe pasea".split()
_ES_ADV = """ayer hoy despacio rápidamente tranquilamente finalmente siempre todavía pronto tarde
temprano enseguida después ahora también apenas cuidadosamente lentamente""".split()
_ES_PREP = "en con sobre para bajo tras hacia desde sin ante".split()
_ES_DET = {"m": ["el", "el", "este", "cada", "nuestro", "un"], "f": ["la", "la", "esta", "cada",
                                                               "nuestra", "una"]}
_ES_CONJ = ["y", "pero", "porque", "aunque", "mientras"]
_ES_OPENERS = ["El lunes,", "En primavera,", "Anoche,", "Tras la lluvia,", "Esta semana,",
               "Por primera vez,", "Desde temprano,"]

_RU_NOUNS = [
    (w, g)
    for g, ws in (
        (
            "m",
            "мост рынок сад порт завод музей театр стадион лес остров причал канал туннель "
            "вокзал город район двор дом забор склад парк журнал комитет велосипед урожай "
            "праздник маяк колодец сарай",
        ),
        (
            "f",
            "библиотека река школа улица больница мельница ферма клиника крыша дорога гора "
            "выставка лодка теплица газета тропа фабрика аптека лестница поляна плотина",
        ),
        ("n", "озеро поле здание село окно письмо общежитие депо"),
    )
    for w in ws.split()
]
_RU_PEOPLE = [
    (w, g)
    for g, ws in (
        ("m", "рыбак плотник пекарь мэр инженер фермер водитель архитектор лесник почтальон"),
        ("f", "учительница садовница медсестра студентка художница соседка библиотекарша"),
    )
    for w in ws.split()
]
_RU_ADJ = """старый новый тихий узкий широкий деревянный каменный северный южный местный
маленький большой светлый тёмный пустой известный скромный современный весёлый молодой
сельский крутой мягкий тяжёлый лёгкий зелёный красный золотой простой крепкий холодный тёплый
солнечный ветреный дождливый уютный шумный чистый длинный высокий низкий красивый
спокойный""".split()
_RU_VT = """починил открыл покрасил посетил описал осмотрел построил измерил сфотографировал
закрыл спроектировал подготовил объявил изучил доставил собрал украсил защитил восстановил
заметил организовал встретил похвалил заменил расширил поддержал купил посадил проверил
обсудил отметил отремонтировал охранял нарисовал показал убрал""".split()
_RU_VI = "ждал работал отдыхал гулял молчал пел спорил стоял сидел жил ходил".split()
_RU_ADV = """вчера сегодня медленно быстро тихо аккуратно наконец снова часто редко вместе вдруг
терпеливо постепенно рано поздно утром вечером осторожно охотно громко спокойно недавно""".split()
_RU_PLACES = [
    "в городе", "на рынке", "у реки", "возле школы", "за мостом", "после дождя", "до рассвета",
    "на берегу", "в саду", "около вокзала", "на площади", "в лесу", "под крышей", "у причала",
    "на окраине", "в центре", "на острове", "в порту", "около музея", "перед театром",
    "за фермой", "вдоль дороги", "на поляне", "у озера", "посреди поля", "рядом с домом",
    "над рекой", "у забора", "на выставке", "в долине",
]
_RU_CONJ = ["и", "но", "а", "поэтому", "хотя"]
_RU_OPENERS = ["В понедельник", "Весной", "Вчера вечером", "После грозы", "На этой неделе",
               "Впервые", "Ранним утром"]

_ZH_PEOPLE = """老师 渔民 木匠 面包师 园丁 市长 工程师 护士 农民 学生 司机 画家 邻居 村民 记者
志愿者 厨师 船长 邮递员 牧羊人""".split()
_ZH_NOUNS = """大桥 市场 图书馆 花园 河流 节日 面包店 果园 博物馆 车站 山谷 学校 工坊 厨房 渡船
灯塔 草地 剧院 工厂 医院 体育场 画廊 电车 磨坊 农场 诊所 森林 小岛 码头 广场 教堂 仓库 小屋
运河 报纸 委员会 自行车 隧道 水库 温室 葡萄园 机场 公路 操场 实验室 书店 餐馆 屋顶 篱笆 道路
山坡 庄稼 茶园 石桥 渔船 钟楼""".split()
_ZH_ADJ = """古老的 崭新的 安静的 狭窄的 宽阔的 木头的 石头的 北边的 南边的 当地的 小小的 巨大的
明亮的 昏暗的 空荡荡的 拥挤的 著名的 朴素的 现代的 细心的 耐心的 快乐的 年轻的 乡村的 海边的
陡峭的 温和的 沉重的 轻便的 公共的 私人的 五颜六色的 泥泞的 结冰的 晴朗的 红色的 金色的 简单的
结实的 温暖的 凉爽的""".split()
_ZH_VT = """修理了 打开了 粉刷了 参观了 描述了 检查了 重建了 测量了 拍摄了 清洁了 关闭了 设计了
计划了 宣布了 探索了 运送了 收集了 装饰了 保护了 修复了 穿过了 观察了 报道了 记录了 组织了
欢迎了 称赞了 替换了 扩建了 支持了 购买了 借走了 搬运了 种植了 收获了 测试了 讨论了 研究了
庆祝了 翻新了 看守了 绘制了 分享了""".split()
_ZH_TIME = """昨天 今天上午 上周 去年秋天 周末 傍晚 清晨 最近 前天晚上 春节前 下午 那天""".split()
_ZH_PLACE = """在河边 在市场里 在山脚下 在村口 在码头旁 在学校附近 在森林深处 在广场上 在车站前
在湖边 在田野里 在小镇上""".split()
_ZH_ADV = "慢慢地 仔细地 终于 又 很快 一起 突然 耐心地 悄悄地 认真地 再次 热情地".split()
_ZH_CONJ = ["但是", "而且", "所以", "因为", "于是", "同时"]

# Per language: sentence separator inside a clause list, full stop, comma, word joiner.
_JOINER = {"zh": ""}
_COMMA = {"zh": "，"}
_STOP = {"zh": "。"}
# Spanish would need an opening "¡", so its sentences always end in a full stop.
_BANG = {"zh": "！", "es": "."}
# Conjunctions that read naturally without a comma before them.
_NO_COMMA_CONJ = {"and", "und", "oder", "et", "y", "и"}


def _pick(rng: random.Random, seq: list[Any]) -> Any:
    return seq[rng.randrange(len(seq))]


def _de_adj(stem: str, strong_e: bool) -> str:
    # Weak declension after a definite article: "-e" in nominative singular and in
    # accusative feminine/neuter, "-en" elsewhere. Stems already ending in "e" only add "n".
    if stem.endswith("e"):
        return stem if strong_e else stem + "n"
    return stem + ("e" if strong_e else "en")


def _de_np(rng: random.Random, case: str, people: bool) -> list[str]:
    word, g = _pick(rng, _DE_PEOPLE if people else _DE_NOUNS)
    gi = "mfn".index(g)
    art = _DE_ART["dieser" if rng.random() < 0.2 else "der"][case][gi]
    if rng.random() < 0.55:
        e = case == "nom" or (case == "acc" and g != "m")
        return [art, _de_adj(_pick(rng, _DE_ADJ), e), word]
    return [art, word]


def _clause_de(rng: random.Random, inverted: bool) -> list[str]:
    subj = _de_np(rng, "nom", rng.random() < 0.35)
    r = rng.random()
    if r < 0.6:
        verb = _pick(rng, _DE_VT)
        rest = _de_np(rng, "acc", False)
        if rng.random() < 0.3:
            rest = [_pick(rng, _DE_ADV)] + rest
        if rng.random() < 0.35:
            rest += [_pick(rng, _DE_PREP)] + _de_np(rng, "dat", False)
    else:
        verb = _pick(rng, _DE_VI)
        rest = [_pick(rng, _DE_PREP)] + _de_np(rng, "dat", False)
        if rng.random() < 0.4:
            rest = [_pick(rng, _DE_ADV)] + rest
    # Main clauses are verb-second: after a fronted phrase the subject follows the verb.
    return [verb] + subj + rest if inverted else subj + [verb] + rest


def _en_np(rng: random.Random, people: bool) -> list[str]:
    noun = _pick(rng, _EN_PEOPLE if people else _EN_NOUNS)
    if rng.random() < 0.55:
        return [_pick(rng, _EN_DET), _pick(rng, _EN_ADJ), noun]
    return [_pick(rng, _EN_DET), noun]


def _clause_en(rng: random.Random, inverted: bool) -> list[str]:
    subj = _en_np(rng, rng.random() < 0.35)
    r = rng.random()
    if r < 0.55:
        out = subj + [_pick(rng, _EN_VT)] + _en_np(rng, False)
        if rng.random() < 0.35:
            out += [_pick(rng, _EN_PREP)] + _en_np(rng, False)
    elif r < 0.8:
        out = subj + [_pick(rng, _EN_VI), _pick(rng, _EN_PREP)] + _en_np(rng, False)
    else:
        out = subj + [_pick(rng, _EN_ADV), _pick(rng, _EN_VT)] + _en_np(rng, False)
    return out


def _romance_np(rng: random.Random, nouns: list, people: list, adjs: list, dets: dict,
                use_people: bool) -> list[str]:
    word, g = _pick(rng, people if use_people else nouns)
    out = [_pick(rng, dets[g]), word]
    if rng.random() < 0.5:
        out.append(_pick(rng, adjs)[0 if g == "m" else 1])
    return out


def _clause_romance(rng: random.Random, lang: str) -> list[str]:
    if lang == "fr":
        nouns, people, adjs, dets = _FR_NOUNS, _FR_PEOPLE, _FR_ADJ, _FR_DET
        vt, vi, adv, prep = _FR_VT, _FR_VI, _FR_ADV, _FR_PREP
    else:
        nouns, people, adjs, dets = _ES_NOUNS, _ES_PEOPLE, _ES_ADJ, _ES_DET
        vt, vi, adv, prep = _ES_VT, _ES_VI, _ES_ADV, _ES_PREP

    def np(use_people: bool = False) -> list[str]:
        return _romance_np(rng, nouns, people, adjs, dets, use_people)

    subj = np(rng.random() < 0.35)
    r = rng.random()
    if r < 0.6:
        out = subj + [_pick(rng, vt)] + np()
        if rng.random() < 0.35:
            out += [_pick(rng, prep)] + np()
    elif r < 0.85:
        out = subj + [_pick(rng, vi), _pick(rng, prep)] + np()
    else:
        out = subj + [_pick(rng, vt)] + np() + [_pick(rng, adv)]
    return out


def _ru_adj(masc: str, g: str, case: str) -> str:
    # Hard-stem adjectives only (-ый, -ой, -кий/-гий/-хий), so the endings are regular.
    if g == "m":
        return masc
    stem = masc[:-2]
    if g == "n":
        return stem + "ое"
    return stem + ("ую" if case == "acc" else "ая")


def _clause_ru(rng: random.Random, inverted: bool) -> list[str]:
    word, g = _pick(rng, _RU_PEOPLE if rng.random() < 0.35 else _RU_NOUNS)
    subj = [word]
    if rng.random() < 0.5:
        subj = [_ru_adj(_pick(rng, _RU_ADJ), g, "nom"), word]
    suffix = {"m": "", "f": "а", "n": "о"}[g]
    r = rng.random()
    if r < 0.6:
        verb = _pick(rng, _RU_VT) + suffix
        # Objects are inanimate, so only feminine nouns change in the accusative (-а -> -у).
        ow, og = _pick(rng, _RU_NOUNS)
        obj = [ow[:-1] + "у" if og == "f" else ow]
        if rng.random() < 0.5:
            obj = [_ru_adj(_pick(rng, _RU_ADJ), og, "acc")] + obj
        rest = [verb] + obj
        if rng.random() < 0.4:
            rest += _pick(rng, _RU_PLACES).split()
    else:
        verb = _pick(rng, _RU_VI) + suffix
        rest = [verb] + _pick(rng, _RU_PLACES).split()
    if rng.random() < 0.3:
        rest = [_pick(rng, _RU_ADV)] + rest
    return subj + rest


def _clause_zh(rng: random.Random, inverted: bool) -> list[str]:
    out = []
    if rng.random() < 0.5:
        out.append(_pick(rng, _ZH_ADJ))
    out.append(_pick(rng, _ZH_PEOPLE if rng.random() < 0.5 else _ZH_NOUNS))
    if rng.random() < 0.5:
        out.append(_pick(rng, _ZH_PLACE))
    if rng.random() < 0.4:
        out.append(_pick(rng, _ZH_ADV))
    out.append(_pick(rng, _ZH_VT))
    if rng.random() < 0.6:
        out.append(_pick(rng, _ZH_ADJ))
    out.append(_pick(rng, _ZH_NOUNS))
    return out


def _clause(rng: random.Random, lang: str, inverted: bool = False) -> list[str]:
    if lang == "en":
        return _clause_en(rng, inverted)
    if lang == "de":
        return _clause_de(rng, inverted)
    if lang in ("fr", "es"):
        return _clause_romance(rng, lang)
    if lang == "ru":
        return _clause_ru(rng, inverted)
    return _clause_zh(rng, inverted)


_OPENERS = {"en": _EN_OPENERS, "de": _DE_OPENERS, "fr": _FR_OPENERS, "es": _ES_OPENERS,
            "ru": _RU_OPENERS, "zh": _ZH_TIME}
_CONJ = {"en": _EN_CONJ, "de": _DE_CONJ, "fr": _FR_CONJ, "es": _ES_CONJ, "ru": _RU_CONJ,
         "zh": _ZH_CONJ}


def _sentence(rng: random.Random, lang: str) -> list[str]:
    """Tokens of one sentence of 8-20 words, punctuation attached to the words."""
    target = rng.randint(8, 20)
    words: list[str] = []
    inverted = False
    if rng.random() < 0.25:
        opener = _pick(rng, _OPENERS[lang])
        words += [opener + _COMMA["zh"]] if lang == "zh" else opener.split()
        inverted = lang == "de"
    words += _clause(rng, lang, inverted)
    # A fronted phrase is at most 3 words and a clause at most 12, so the first clause never
    # passes 20 words and one more clause always fits while the sentence is under 8 words.
    while len(words) < target:
        conj = _pick(rng, _CONJ[lang])
        clause = _clause(rng, lang)
        if len(words) + 1 + len(clause) > 20:
            if len(words) >= 8:
                break
            continue
        if conj not in _NO_COMMA_CONJ:
            words[-1] += _COMMA.get(lang, ",")
        words += [conj] + clause
    end = _BANG.get(lang, "!") if rng.random() < 0.08 else _STOP.get(lang, ".")
    words[-1] += end
    words[0] = words[0][:1].upper() + words[0][1:]
    return words


def _render_sentence(tokens: list[str], lang: str) -> str:
    return _JOINER.get(lang, " ").join(tokens)


@dataclass
class _Article:
    lang: str
    title: str
    # paragraphs -> sentences -> tokens; kept as tokens so near-duplicates can swap words.
    paragraphs: list[list[list[str]]]

    def paragraph_texts(self) -> list[str]:
        sep = _JOINER.get(self.lang, " ")
        return [sep.join(_render_sentence(s, self.lang) for s in p) for p in self.paragraphs]

    def text(self) -> str:
        return "\n".join(self.paragraph_texts())


def _title(rng: random.Random, lang: str) -> str:
    words = _clause(rng, lang)
    words[0] = words[0][:1].upper() + words[0][1:]
    return _render_sentence(words, lang)


def _make_article(rng: random.Random, lang: str, min_paragraphs: int = 5) -> _Article:
    paragraphs = [
        [_sentence(rng, lang) for _ in range(rng.randint(3, 6))]
        for _ in range(rng.randint(min_paragraphs, 12))
    ]
    return _Article(lang, _title(rng, lang), paragraphs)


def _near_duplicate(
    rng: random.Random, original: _Article, target: float
) -> tuple[_Article, float]:
    """Copy of an English article with words replaced until the shingle Jaccard is closest to
    the target. Positions and replacement words are drawn once, so J(k) falls as k grows and a
    binary search over k finds the closest level."""
    positions = [
        (pi, si, wi)
        for pi, para in enumerate(original.paragraphs)
        for si, sent in enumerate(para)
        for wi in range(len(sent))
    ]
    rng.shuffle(positions)
    replacements = []
    for pi, si, wi in positions:
        token = original.paragraphs[pi][si][wi]
        core = token.rstrip(",.!?")
        tail = token[len(core):]
        word = _pick(rng, _EN_WORDS)
        while word == core.lower():
            word = _pick(rng, _EN_WORDS)
        if core[:1].isupper():
            word = word[:1].upper() + word[1:]
        replacements.append(word + tail)
    base = word_shingles(original.text())

    def build(k: int) -> _Article:
        paras = [[list(s) for s in p] for p in original.paragraphs]
        for (pi, si, wi), new in zip(positions[:k], replacements[:k], strict=True):
            paras[pi][si][wi] = new
        return _Article(original.lang, original.title, paras)

    def score(k: int) -> float:
        return jaccard(base, word_shingles(build(k).text()))

    lo, hi = 0, len(positions)
    while lo < hi:
        mid = (lo + hi) // 2
        if score(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    best = min((k for k in (lo - 1, lo) if k >= 0), key=lambda k: abs(score(k) - target))
    copy = build(best)
    return copy, jaccard(base, word_shingles(copy.text()))


# --------------------------------------------------------------------------------------------
# Sites. Each host repeats the same header, navigation and footer on every page: the
# boilerplate that text extraction has to remove.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Site:
    host: str
    lang: str
    name: str
    sections: tuple[str, ...]


_SITES = (
    _Site("news.example-herald.com", "en", "Example Herald",
          ("Local", "World", "Business", "Opinion", "Weather")),
    _Site("blog.kitchen-notes.co.uk", "en", "Kitchen Notes",
          ("Recipes", "Seasonal", "Bakes", "Pantry", "About")),
    _Site("www.harbourside-gazette.com.au", "en", "Harbourside Gazette",
          ("Coast", "Community", "Sport", "Events", "Letters")),
    _Site("garden.greenfield-journal.org", "en", "Greenfield Journal",
          ("Vegetables", "Orchards", "Tools", "Calendar", "Forum")),
    _Site("www.riverbend-post.co.nz", "en", "Riverbend Post",
          ("Region", "Farming", "Schools", "Roads", "Notices")),
    _Site("tech.lowtide-review.net", "en", "Lowtide Review",
          ("Hardware", "Repairs", "Workshops", "Reviews", "Guides")),
    _Site("www.bergwetter.de", "de", "Bergwetter",
          ("Vorhersage", "Gipfel", "Wandern", "Lawinen", "Archiv")),
    _Site("nachrichten.talblick-zeitung.de", "de", "Talblick Zeitung",
          ("Region", "Wirtschaft", "Kultur", "Sport", "Leserbriefe")),
    _Site("www.carnet-du-marche.fr", "fr", "Le Carnet du Marché",
          ("Région", "Marchés", "Culture", "Saisons", "Courrier")),
    _Site("www.diario-costero.es", "es", "Diario Costero",
          ("Costa", "Pueblos", "Cultura", "Deportes", "Opinión")),
    _Site("www.cronica-pampeana.com.ar", "es", "Crónica Pampeana",
          ("Campo", "Ciudad", "Cultura", "Clima", "Cartas")),
    _Site("novosti.severny-vestnik.ru", "ru", "Северный вестник",
          ("Город", "Район", "Культура", "Погода", "Письма")),
    _Site("www.lanshan-ribao.com.cn", "zh", "蓝山日报",
          ("本地", "经济", "文化", "天气", "读者来信")),
)
_SPAM_SITES = (
    _Site("deals.mega-bargain-outlet.biz", "en", "MEGA BARGAIN OUTLET",
          ("DEALS", "HOT", "CHEAP", "FREE", "BUY NOW")),
    _Site("www.best-price-super-store.info", "en", "Best Price Super Store",
          ("Offers", "Coupons", "Bonus", "Winners", "Checkout")),
)
# A domain on the project's default URL blocklist (udfs/lists/url_banned_domains.txt).
_BLOCKED_SITE = _Site("www.casino-bonus.example", "en", "Casino Bonus News",
                      ("Slots", "Poker", "Bonus", "Winners", "Blog"))
_SITES_BY_LANG = {lang: [s for s in _SITES if s.lang == lang] for lang in LANGS}

# Sentences with accented words, for the text-repair pages. Every character's UTF-8 bytes are
# defined in cp1252, so the mis-decoding round trip is lossless and ftfy can undo it.
_ACCENTED_SENTENCES = (
    "The café owner José served crème brûlée and pâté to naïve visitors from Besançon.",
    "Our façade survey — begun in the spring — found the régime of repairs too costly.",
    "A señor from Málaga and a fräulein from Zürich compared their résumés at the soirée.",
    "The protégé’s début at the théâtre drew applause from the entire rococo salon.",
    "Piñata makers in Córdoba sold their wares beside the crêpe stall and the smörgåsbord.",
    "The naïve coöperative rejected the décor, the fiancée’s canapés and the jalapeños.",
    "Renée and Zoë met the maître d’ at the Brasserie Lipp before the première in Nîmes.",
    "The rosé from Mâcon and the Gewürztraminer from Colmar pleased the émigré critics.",
    "Señora Núñez bought jalapeño jam, crème fraîche and a piñata at the mercado in Jaén.",
    "Their château near Orléans had a belvédère, a glacière and a très élégant parterre.",
    "Björn, Jürgen and Søren skied past the Matterhorn to a hütte serving rösti and glühwein.",
    "The déjà vu of the naïveté in the exposé left the blasé attaché in a state of ennui.",
)

_HOME = {"en": "Home", "de": "Startseite", "fr": "Accueil", "es": "Inicio", "ru": "Главная",
         "zh": "首页"}
_CONTACT = {"en": "Contact", "de": "Kontakt", "fr": "Contact", "es": "Contacto",
            "ru": "Контакты", "zh": "联系我们"}
_COOKIE = {
    "en": "We use cookies to remember your settings and to count visits. By continuing you "
          "accept our cookie policy.",
    "de": "Wir verwenden Cookies, um Einstellungen zu speichern und Besuche zu zählen. Mit der "
          "weiteren Nutzung stimmen Sie zu.",
    "fr": "Nous utilisons des cookies pour mémoriser vos réglages et compter les visites. En "
          "continuant, vous acceptez notre politique.",
    "es": "Usamos cookies para recordar sus ajustes y contar las visitas. Al continuar acepta "
          "nuestra política de cookies.",
    "ru": "Мы используем файлы cookie, чтобы запоминать настройки и считать посещения. "
          "Продолжая, вы соглашаетесь с правилами сайта.",
    "zh": "本网站使用cookie来保存您的设置并统计访问量。继续浏览即表示您同意我们的cookie政策。",
}
_RIGHTS = {"en": "All rights reserved.", "de": "Alle Rechte vorbehalten.",
           "fr": "Tous droits réservés.", "es": "Todos los derechos reservados.",
           "ru": "Все права защищены.", "zh": "版权所有。"}


def _page_html(
    site: _Site,
    lang: str,
    title: str,
    date: datetime,
    main: list[str],
    meta_charset: str | None = "utf-8",
) -> str:
    """A whole page: site header and navigation, the given <main> content, site footer."""
    nav = [f'<li><a href="/">{html.escape(_HOME[lang])}</a></li>']
    nav += [
        f'<li><a href="/{_slug(s) or "section"}/">{html.escape(s)}</a></li>' for s in site.sections
    ]
    nav.append(f'<li><a href="/contact/">{html.escape(_CONTACT[lang])}</a></li>')
    head = ["<head>"]
    if meta_charset:
        head.append(f'<meta charset="{meta_charset}">')
    head += [
        f"<title>{html.escape(title, quote=False)} | {html.escape(site.name)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="stylesheet" href="/static/site.css">',
        "</head>",
    ]
    lines = [
        "<!DOCTYPE html>",
        f'<html lang="{lang}">',
        *head,
        "<body>",
        "<header>",
        f'<a class="logo" href="/">{html.escape(site.name)}</a>',
        "<nav>",
        "<ul>",
        *nav,
        "</ul>",
        "</nav>",
        "</header>",
        "<main>",
        *main,
        "</main>",
        "<footer>",
        f'<p class="cookie-banner">{html.escape(_COOKIE[lang], quote=False)}</p>',
        f'<p class="copyright">© {date.year} {html.escape(site.name)}. {_RIGHTS[lang]}</p>',
        "</footer>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(lines)


def _article_main(title: str, date: datetime, paragraphs: list[str]) -> list[str]:
    return [
        "<article>",
        f"<h1>{html.escape(title, quote=False)}</h1>",
        f'<time datetime="{date:%Y-%m-%d}">{date:%Y-%m-%d}</time>',
        *[f"<p>{html.escape(p, quote=False)}</p>" for p in paragraphs],
        "</article>",
    ]


def _slug(text: str) -> str:
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    words = "".join(c if c.isalnum() else " " for c in ascii_text.lower()).split()
    return "-".join(words[:6])


# --------------------------------------------------------------------------------------------
# Personal data planted in English articles. Values are made up but pass the same checks a
# detector applies (Luhn, IBAN mod-97, SSN area rules), so a detector that validates still
# finds them.
# --------------------------------------------------------------------------------------------

_FIRST_NAMES = """Maria Jonas Elena Tobias Priya Samuel Ingrid Marco Leila Oskar Nadia Felix Hanna
Rafael Greta Tomas Aisha Viktor Clara Emil""".split()
_LAST_NAMES = """Keller Brandt Moreau Lindqvist Okafor Haldane Petrova Castellano Whitcombe
Nakamura Fairbairn Dubois Ostrowski Penhallow Varga Ashdown Kovalenko Thorne Marchetti
Albrecht""".split()
_MAIL_DOMAINS = ("letterbox-mail.com", "inbox-harbour.org", "postroom.example.net")


def luhn_valid(number: str) -> bool:
    """True when the digits of number (separators ignored) pass the Luhn check."""
    digits = [int(c) for c in number if c.isdigit()]
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2 == 1:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return bool(digits) and total % 10 == 0


def iban_valid(iban: str) -> bool:
    """True when the IBAN (spaces ignored) passes the ISO 13616 mod-97 check."""
    compact = iban.replace(" ", "").upper()
    rearranged = compact[4:] + compact[:4]
    return int("".join(str(int(c, 36)) for c in rearranged)) % 97 == 1


def _card_number(rng: random.Random) -> str:
    digits = [4] + [rng.randrange(10) for _ in range(14)]
    for check in range(10):
        if luhn_valid("".join(map(str, digits + [check]))):
            digits.append(check)
            break
    raw = "".join(map(str, digits))
    sep = " " if rng.random() < 0.5 else "-"
    return sep.join(raw[i : i + 4] for i in range(0, 16, 4))


def _german_iban(rng: random.Random) -> str:
    bban = str(rng.randint(10000000, 89999999)) + f"{rng.randrange(10**10):010d}"
    numeric = "".join(str(int(c, 36)) for c in bban + "DE00")
    check = 98 - int(numeric) % 97
    compact = f"DE{check:02d}{bban}"
    return " ".join(compact[i : i + 4] for i in range(0, len(compact), 4))


def _ssn(rng: random.Random) -> str:
    area = rng.randint(1, 899)
    if area == 666:
        area = 667
    return f"{area:03d}-{rng.randint(1, 99):02d}-{rng.randint(1, 9999):04d}"


def _phone(rng: random.Random) -> str:
    area = _pick(rng, [415, 212, 312, 617, 503, 206, 303, 512, 919, 802])
    line = f"555-01{rng.randrange(100):02d}"
    return f"({area}) {line}" if rng.random() < 0.5 else f"+1 {area}-{line}"


def _ipv4(rng: random.Random) -> str:
    first = rng.randint(11, 223)
    if first == 127:
        first = 128
    return f"{first}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randint(1, 254)}"


def _pii_sentences(rng: random.Random) -> tuple[list[str], list[dict[str, str]]]:
    first, last = _pick(rng, _FIRST_NAMES), _pick(rng, _LAST_NAMES)
    mail_first, mail_last = _pick(rng, _FIRST_NAMES), _pick(rng, _LAST_NAMES)
    email = f"{mail_first.lower()}.{mail_last.lower()}@{_pick(rng, list(_MAIL_DOMAINS))}"
    values = [
        ("EMAIL_ADDRESS", email,
         "Readers who spot a mistake can write to {} and the desk will reply within a week."),
        ("PHONE_NUMBER", _phone(rng),
         "The office answers questions on {} every weekday morning before the market opens."),
        ("CREDIT_CARD", _card_number(rng),
         "One caller said the card {} was charged twice for the same festival ticket."),
        ("IP_ADDRESS", _ipv4(rng),
         "The booking server at {} logged every request during the busy opening hour."),
        ("IBAN_CODE", _german_iban(rng),
         "Donations for the new roof go to the account {} at the local savings bank."),
        ("US_SSN", _ssn(rng),
         "A copied form showed the number {} printed next to the signature of the tenant."),
        ("PERSON", f"{first} {last}",
         '"We expect the repairs to finish before the first frost," said {}, the spokesperson.'),
    ]
    sentences = [template.format(value) for _, value, template in values]
    return sentences, [{"type": t, "value": v} for t, v, _ in values]


# --------------------------------------------------------------------------------------------
# WARC writing.
# --------------------------------------------------------------------------------------------

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _warc_date(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _http_date(t: datetime) -> str:
    # Spelled out by hand: strftime's %a/%b follow the process locale.
    return (f"{_DAYS[t.weekday()]}, {t.day:02d} {_MONTHS[t.month - 1]} {t.year} "
            f"{t:%H:%M:%S} GMT")


def _sha1_b32(data: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(data).digest()).decode("ascii")


def _record_bytes(headers: list[tuple[str, str]], block: bytes) -> bytes:
    lines = ["WARC/1.0"] + [f"{k}: {v}" for k, v in headers]
    lines.append(f"Content-Length: {len(block)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")
    return head + block + b"\r\n\r\n"


def _member(record: bytes) -> bytes:
    return gzip.compress(record, compresslevel=_GZIP_LEVEL, mtime=0)


def _http_block(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [status] + [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + body


@dataclass
class _Page:
    """One fetched URL: the response to write and the label fields that describe it."""

    kind: str
    expected: str
    site: _Site
    url: str
    block: bytes
    payload: bytes | None
    lang: str | None = None
    identified_type: str | None = None
    duplicate_of: str | None = None
    jaccard: float | None = None
    jaccard_target: float | None = None
    pii: list[dict[str, str]] = field(default_factory=list)
    charset: str | None = None
    probe: str | None = None  # a string the text extracted by ingest must contain
    article_text: str | None = None
    body: bytes = b""


class _WarcWriter:
    """Builds one WARC file in memory, tracking byte offsets for the labels."""

    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name
        self.rng = rng
        self.buf = bytearray()
        self.counts: Counter[str] = Counter()
        self.warcinfo_id = ""

    def new_id(self) -> str:
        return f"<urn:uuid:{uuid.UUID(int=self.rng.getrandbits(128), version=4)}>"

    def write(self, rtype: str, headers: list[tuple[str, str]], block: bytes, *,
              cut: bool = False, counted: bool = True) -> int:
        """Append one record as its own gzip member; returns the member's offset. With cut,
        only the first half of the compressed member is written."""
        offset = len(self.buf)
        member = _member(_record_bytes(headers, block))
        if cut:
            member = member[: len(member) // 2]
        self.buf += member
        if counted:
            self.counts[rtype] += 1
        return offset

    def write_warcinfo(self, date: str) -> None:
        self.warcinfo_id = self.new_id()
        fields = [
            ("isPartOf", CRAWL_NAME),
            ("publisher", "tokenmill sample crawl"),
            ("description", "Synthetic crawl with labelled faults for pipeline tests"),
            ("operator", "tokenmill"),
            ("hostname", "sample-crawler-01"),
            ("software", "tokenmill.jobs.sample_crawl"),
            ("format", "WARC File Format 1.0"),
            ("conformsTo",
             "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.0/"),
        ]
        block = "".join(f"{k}: {v}\r\n" for k, v in fields).encode("utf-8")
        self.write("warcinfo", [
            ("WARC-Type", "warcinfo"),
            ("WARC-Date", date),
            ("WARC-Filename", self.name),
            ("WARC-Record-ID", self.warcinfo_id),
            ("Content-Type", "application/warc-fields"),
        ], block)


@dataclass
class _Plan:
    slots: list[str]
    damage: str | None  # "garbage" or "lost" for files that are not the last one
    garbage_after: int  # slot index after whose records the garbage goes


# Fixed number of planted pages per file, so tests can count them exactly.
_PER_FILE = (
    ["exact_duplicate"] * 2
    + ["near_duplicate"] * len(NEAR_DUPLICATE_TARGETS)
    + ["pii"] * 3
    + ["spam"] * 2
    + ["low_quality"] * 2
    + ["blocked_url", "mojibake", "garbled"]
    + ["http_404", "http_redirect", "bad_http", "undecodable", "empty_text"]
)
_FIRST_FILE_ONLY = ["legacy_latin1", "legacy_cp1251", "image_jpeg", "pdf", "text_plain",
                    "too_large"]
# The first slots of each file are plain articles: four English ones are the originals of that
# file's near-duplicates, the other two seed the pool exact duplicates are copied from.
_HEAD = ["near_original"] * len(NEAR_DUPLICATE_TARGETS) + ["article"] * 2


def _plan_file(rng: random.Random, index: int, files: int, pages: int) -> _Plan:
    last = index == files - 1
    planted = list(_PER_FILE) + (_FIRST_FILE_ONLY if index == 0 else ["image_png"])
    damage = None
    if not last:
        # The first file gets garbage between records, the second a half-written member;
        # further files alternate.
        damage = "garbage" if index % 2 == 0 else "lost"
        if damage == "lost":
            planted.append("lost")
    tail = ["truncated"] if last else []
    free = pages - len(_HEAD) - len(planted) - len(tail)
    if free < 0:
        need = len(_HEAD) + len(planted) + len(tail)
        raise ValueError(f"pages_per_file={pages} is too small: file {index} needs {need}")
    rest = planted + ["article"] * free
    rng.shuffle(rest)
    slots = _HEAD + rest + tail
    return _Plan(slots, damage, len(slots) // 2)


def reference_corpus(lang: str, docs: int, seed: int = 1) -> list[str]:
    """Clean articles in one language from the generator's grammar: the reference sample the
    perplexity model trains on when no reference corpus (e.g. Wikipedia) is given. Seeded
    apart from the crawl, so its texts are not the crawl's pages."""
    if lang not in LANGS:
        raise ValueError(f"no generator for language {lang!r} (have: {', '.join(LANGS)})")
    rng = random.Random(f"reference-{lang}-{seed}")
    return [_make_article(rng, lang).text() for _ in range(docs)]


def _expected_filter(page: _Page) -> str | None:
    """What the filter stages (langid → urlfilter → quality, default config) must do with a
    page ingest keeps: "kept", "dropped" (by some rule), or "<stage>:<reason>" exactly."""
    if page.expected != KEPT:
        return None
    if page.lang != "en":
        return "langid:lang_not_target"
    if page.kind == "blocked_url":
        return "urlfilter:blocked_domain"
    if page.kind == "garbled":
        return "quality:unrepairable_text"
    if page.kind in ("spam", "low_quality"):
        return "dropped"
    return "kept"


def _file_name(index: int) -> str:
    return f"{CRAWL_NAME}-{index:05d}.warc.gz"


class _Generator:
    def __init__(self, out: Path, files: int, pages: int, seed: int, huge_bytes: int) -> None:
        self.out = out
        self.files = files
        self.pages = pages
        self.seed = seed
        self.huge_bytes = huge_bytes
        self.rng = random.Random(seed)
        rng = self.rng
        self.clock = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(
            days=rng.randrange(330), seconds=rng.randrange(86400)
        )
        self.ips = {
            s.host: f"{rng.randint(23, 212)}.{rng.randrange(256)}.{rng.randrange(256)}."
                    f"{rng.randint(2, 250)}"
            for s in (*_SITES, *_SPAM_SITES, _BLOCKED_SITE)
        }
        self.page_no = 0
        self.labels: list[dict[str, Any]] = []
        self.records: Counter[str] = Counter()
        # Articles that exact duplicates may copy: (doc_id, page), earlier files and this one.
        self.pool_prev: list[tuple[str, _Page]] = []
        self.pool_cur: list[tuple[str, _Page]] = []

    # ---------------------------------------------------------------- page builders

    def tick(self) -> datetime:
        self.clock += timedelta(seconds=self.rng.randint(2, 45))
        return self.clock

    def url(self, site: _Site, title: str, prefix: str = "") -> str:
        self.page_no += 1
        section = _slug(_pick(self.rng, list(site.sections))) or "news"
        slug = _slug(title) or "story"
        return (f"https://{site.host}/{prefix}{section}/{self.clock:%Y/%m}/"
                f"{slug}-{self.page_no}.html")

    def html_page(self, kind: str, site: _Site, lang: str, article: _Article,
                  date: datetime, url: str | None = None) -> _Page:
        doc = _page_html(site, lang, article.title, date,
                         _article_main(article.title, date, article.paragraph_texts()))
        body = doc.encode("utf-8")
        return self.response_page(kind, KEPT, site, url or self.url(site, article.title), body,
                                  "text/html; charset=utf-8", lang=lang, charset="utf-8")

    def response_page(self, kind: str, expected: str, site: _Site, url: str, body: bytes,
                      content_type: str | None, *, lang: str | None = None,
                      charset: str | None = None, status: str = "HTTP/1.1 200 OK",
                      extra: list[tuple[str, str]] | None = None) -> _Page:
        headers = [("Date", _http_date(self.clock)), ("Server", "nginx")]
        headers += extra or []
        if content_type:
            headers.append(("Content-Type", content_type))
        headers += [("Content-Length", str(len(body))), ("Connection", "close")]
        ident = content_type.split(";")[0] if content_type else None
        return _Page(kind, expected, site, url, _http_block(status, headers, body), body,
                     lang=lang, identified_type=ident, charset=charset, body=body)

    def article_page(self, lang: str | None = None) -> tuple[_Page, _Article]:
        lang = lang or self.rng.choices(LANGS, _LANG_WEIGHTS)[0]
        site = _pick(self.rng, _SITES_BY_LANG[lang])
        article = _make_article(self.rng, lang)
        return self.html_page("article", site, lang, article, self.clock), article

    def pii_page(self) -> _Page:
        site = _pick(self.rng, _SITES_BY_LANG["en"])
        article = _make_article(self.rng, "en")
        sentences, pii = _pii_sentences(self.rng)
        for sentence in sentences:
            para = _pick(self.rng, article.paragraphs)
            para.insert(self.rng.randint(0, len(para)), sentence.split(" "))
        page = self.html_page("pii", site, "en", article, self.clock)
        page.pii = pii
        return page

    def spam_page(self) -> _Page:
        rng = self.rng
        site = _pick(rng, list(_SPAM_SITES))
        products = ["watches", "sneakers", "loans", "pills", "phones", "handbags", "casino bonus",
                    "followers", "sunglasses", "vpn"]
        kw = _pick(rng, products)
        extra = ["cheap", "best", "buy", "discount", "free", "online", "deal", "sale", "price"]
        title = f"CHEAP {kw.upper()} BEST {kw.upper()} BUY {kw.upper()} NOW"
        stuffed = " ".join(_pick(rng, [kw, kw, kw] + extra) for _ in range(rng.randint(90, 140)))
        offer = f"LIMITED OFFER!!! CLICK HERE NOW!!! {rng.randint(50, 95)}% OFF ALL " \
                f"{kw.upper()} TODAY ONLY!!!"
        repeated = f"Buy cheap {kw} online, best {kw} price, free shipping on {kw}."
        main = ["<article>", f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(stuffed)}</p>"]
        main += [f"<p>{html.escape(offer)}</p>"] * rng.randint(12, 20)
        main += [f"<p>{html.escape(repeated)}</p>"] * rng.randint(25, 40)
        main += ["<ul>"] + [f"<li>{html.escape(kw)} {x}</li>" for x in extra] + ["</ul>"]
        main.append("</article>")
        body = _page_html(site, "en", title, self.clock, main).encode("utf-8")
        return self.response_page("spam", KEPT, site, self.url(site, f"{kw} deals"), body,
                                  "text/html; charset=utf-8", lang="en", charset="utf-8")

    def low_quality_page(self) -> _Page:
        rng = self.rng
        site = _pick(rng, _SITES_BY_LANG["en"])
        items = ["Home", "Archive", "Tags", "Login", "Register", "Search", "Print", "Share",
                 "Subscribe", "Next", "Previous", "Top", "Menu", "Help", "Sitemap", "Feeds"]
        teasers = ["Read more…", "Loading…", "Click to expand…", "Show all comments…",
                   "Continue reading…", "See the full list…", "More photos…", "Please wait…"]
        code = [
            "function openMenu() { var nav = document.getElementById('nav'); nav.className = "
            "'open'; }",
            "window.onload = function () { initSlider({ speed: 300, loop: true }); };",
            "if (typeof jQuery === 'undefined') { loadScript('/static/jquery.js'); }",
        ]
        main = ["<div class=\"listing\">", "<ul>"]
        main += [f'<li><a href="/{i.lower()}/">{i}</a></li>' for i in rng.sample(items, 12)]
        main += ["</ul>"]
        main += [f"<p>{t}</p>" for t in rng.sample(teasers, 6)]
        main += [f"<p>{html.escape(c, quote=False)}</p>" for c in code]
        main += ["<p>You need to enable javascript to view this page.</p>",
                 "<p>placeholder text goes here</p>",
                 "<p>Title here</p>", "<p>Item 1</p>", "<p>Item 2</p>", "<p>Item 3</p>",
                 "<p>TODO: replace this block with real content {{ content }}</p>"]
        main += [f"<p>{t}</p>" for t in rng.sample(teasers, 4)]
        main.append("</div>")
        title = f"{_pick(rng, items)} | {_pick(rng, items)}"
        body = _page_html(site, "en", title, self.clock, main).encode("utf-8")
        return self.response_page("low_quality", KEPT, site, self.url(site, "list"), body,
                                  "text/html; charset=utf-8", lang="en", charset="utf-8")

    def legacy_page(self, which: str) -> _Page:
        if which == "legacy_latin1":
            lang, charset, probe = "de", "iso-8859-1", "Grüße"
            closing = ("Herzliche Grüße an alle Leserinnen und Leser im oberen Tal, bis zur "
                       "nächsten Ausgabe am Dienstag.")
        else:
            lang, charset, probe = "ru", "windows-1251", "благодарит"
            closing = ("Редакция благодарит читателей за тёплые письма и передаёт привет "
                       "жителям Заречья.")
        site = _SITES_BY_LANG[lang][0]
        article = _make_article(self.rng, lang)
        article.paragraphs.append([closing.split(" ")])
        main = _article_main(article.title, self.clock, article.paragraph_texts())
        if charset == "iso-8859-1":
            # Declared only in the HTTP header: the page itself carries no <meta charset>.
            doc = _page_html(site, lang, article.title, self.clock, main, meta_charset=None)
            content_type = f"text/html; charset={charset}"
        else:
            # Declared only in the page: the HTTP header names no charset.
            doc = _page_html(site, lang, article.title, self.clock, main, meta_charset=charset)
            content_type = "text/html"
        body = doc.encode(charset)
        page = self.response_page("legacy_charset", KEPT, site, self.url(site, article.title),
                                  body, content_type, lang=lang, charset=charset)
        page.probe = probe
        return page

    def blocked_url_page(self) -> _Page:
        article = _make_article(self.rng, "en")
        page = self.html_page("blocked_url", _BLOCKED_SITE, "en", article, self.clock)
        page.article_text = article.text()
        return page

    def repair_page(self, kind: str) -> _Page:
        """An English article with accented words, served as UTF-8 but broken on the way:
        `mojibake` was decoded as cp1252 and re-encoded (ftfy repairs it; the quality stage
        keeps it), `garbled` lost every accented letter to U+FFFD in a lossy decode (nothing
        can repair that; the quality stage drops it as unrepairable_text)."""
        rng = self.rng
        site = _pick(rng, _SITES_BY_LANG["en"])
        article = _make_article(rng, "en")
        for sentence in _ACCENTED_SENTENCES:
            para = _pick(rng, article.paragraphs)
            para.insert(rng.randint(0, len(para)), sentence.split(" "))
        page = self.html_page(kind, site, "en", article, self.clock)
        text = page.body.decode("utf-8")
        if kind == "mojibake":
            broken = text.encode("utf-8").decode("cp1252").encode("utf-8")
            page.probe = "cafÃ©"  # what ingest extracts; the quality stage repairs it
        else:
            broken = "".join(c if ord(c) < 128 or c in "«»©" else "\ufffd" for c in text)
            broken = broken.encode("utf-8")
            page.probe = "caf\ufffd"
        page.body = page.payload = broken
        page.block = _http_block("HTTP/1.1 200 OK", [
            ("Date", _http_date(self.clock)), ("Server", "nginx"),
            ("Content-Type", "text/html; charset=utf-8"),
            ("Content-Length", str(len(broken))), ("Connection", "close"),
        ], broken)
        return page

    def too_large_page(self) -> _Page:
        site = _pick(self.rng, _SITES_BY_LANG["en"])
        article = _make_article(self.rng, "en")
        paras = article.paragraph_texts()
        # Repeated paragraphs: over the size limit, yet the gzip member stays small.
        per_copy = len("".join(f"<p>{p}</p>\n" for p in paras).encode("utf-8"))
        repeat = self.huge_bytes // per_copy + 1
        doc = _page_html(site, "en", article.title, self.clock,
                         _article_main(article.title, self.clock, paras * repeat))
        body = doc.encode("utf-8")
        assert len(body) > self.huge_bytes
        return self.response_page("too_large", TOO_LARGE, site, self.url(site, article.title),
                                  body, "text/html; charset=utf-8", lang="en", charset="utf-8")

    def dropped_page(self, slot: str) -> _Page:
        rng = self.rng
        site = _pick(rng, _SITES_BY_LANG[_pick(rng, ["en", "en", "de", "fr", "es"])])
        if slot == "http_404":
            body = (b"<html><head><title>404 Not Found</title></head><body><h1>Not Found</h1>"
                    b"<p>The requested page could not be found on this server.</p></body></html>")
            return self.response_page("http_404", HTTP_STATUS, site, self.url(site, "missing"),
                                      body, "text/html; charset=utf-8", charset="utf-8",
                                      status="HTTP/1.1 404 Not Found")
        if slot == "http_redirect":
            target = self.url(site, "moved")
            body = (f'<html><body><p>This page has moved to <a href="{target}">{target}</a>.'
                    f"</p></body></html>").encode()
            return self.response_page("http_redirect", HTTP_STATUS, site,
                                      self.url(site, "old"), body, "text/html; charset=utf-8",
                                      charset="utf-8", status="HTTP/1.1 301 Moved Permanently",
                                      extra=[("Location", target)])
        if slot == "image_jpeg":
            body = (b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
                    + rng.randbytes(rng.randint(300, 600)) + b"\xff\xd9")
            return self.response_page("image_jpeg", NOT_HTML, site,
                                      f"https://{site.host}/images/photo-{rng.randrange(10**6)}"
                                      ".jpg", body, "image/jpeg")
        if slot == "image_png":
            body = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + rng.randbytes(rng.randint(300, 600))
                    + b"\x00\x00\x00\x00IEND\xaeB`\x82")
            return self.response_page("image_png", NOT_HTML, site,
                                      f"https://{site.host}/images/chart-{rng.randrange(10**6)}"
                                      ".png", body, "image/png")
        if slot == "pdf":
            stream = rng.randbytes(rng.randint(200, 400))
            body = (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\n"
                    b"endobj\n2 0 obj\n<< /Type /Pages /Kids [] /Count 0 >>\nendobj\n"
                    b"3 0 obj\n<< /Length " + str(len(stream)).encode() + b" >>\nstream\n"
                    + stream + b"\nendstream\nendobj\ntrailer\n<< /Root 1 0 R >>\n%%EOF\n")
            return self.response_page("pdf", NOT_HTML, site,
                                      f"https://{site.host}/files/report-{rng.randrange(10**6)}"
                                      ".pdf", body, "application/pdf")
        if slot == "text_plain":
            text = "\n".join(_render_sentence(_sentence(rng, "en"), "en") for _ in range(6))
            return self.response_page("text_plain", NOT_HTML, site,
                                      f"https://{site.host}/notes/readme-{rng.randrange(10**6)}"
                                      ".txt", text.encode() + b"\n", "text/plain; charset=utf-8",
                                      charset="utf-8")
        if slot == "undecodable":
            noise = rng.randbytes(4000)
            # Random bytes are practically never valid UTF-8; make sure of it.
            while _is_utf8(noise):
                noise = rng.randbytes(4000)
            body = b"<html><body>" + noise + b"</body></html>"
            return self.response_page("undecodable", UNDECODABLE, site,
                                      self.url(site, "noise"), body,
                                      "text/html; charset=utf-8", charset="utf-8")
        if slot == "empty_text":
            body = (b'<!DOCTYPE html><html><head><meta charset="utf-8">'
                    b"<script>window.dataLayer = window.dataLayer || []; dataLayer.push("
                    b"{event: 'view'});</script><style>body { margin: 0; color: #222; }</style>"
                    b"</head><body></body></html>")
            return self.response_page("empty_text", EMPTY_TEXT, site, self.url(site, "app"),
                                      body, "text/html; charset=utf-8", charset="utf-8")
        if slot == "bad_http":
            article = _make_article(rng, site.lang)
            body = _page_html(site, site.lang, article.title, self.clock,
                              _article_main(article.title, self.clock,
                                            article.paragraph_texts())).encode()
            # Broken status line and a header line without a colon.
            block = (b"HTP/1.1 two-hundred OK\r\nContent-Type text/html\r\nServer: nginx\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            return _Page("bad_http", BAD_HTTP, site, self.url(site, article.title), block, None,
                         charset="utf-8", body=body)
        raise ValueError(slot)

    # ---------------------------------------------------------------- writing

    def emit(self, w: _WarcWriter, page: _Page, mode: str = "normal") -> tuple[str, int]:
        """Write request, response and metadata of a page. mode "lost" writes half of the
        response member (uncounted); "truncated" does the same, counts it and stops there."""
        date = _warc_date(self.clock)
        req_id, resp_id, meta_id = w.new_id(), w.new_id(), w.new_id()
        path = page.url.split("/", 3)[3] if page.url.count("/") >= 3 else ""
        req_block = (f"GET /{path} HTTP/1.1\r\nHost: {page.site.host}\r\n"
                     "User-Agent: tokenmill-sample-crawler/1.0\r\n"
                     "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n"
                     "Accept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip\r\n"
                     "Connection: close\r\n\r\n").encode("ascii")
        ip = self.ips[page.site.host]
        w.write("request", [
            ("WARC-Type", "request"),
            ("WARC-Date", date),
            ("WARC-Record-ID", req_id),
            ("Content-Type", "application/http; msgtype=request"),
            ("WARC-Warcinfo-ID", w.warcinfo_id),
            ("WARC-IP-Address", ip),
            ("WARC-Target-URI", page.url),
            ("WARC-Block-Digest", _sha1_b32(req_block)),
        ], req_block)
        headers = [
            ("WARC-Type", "response"),
            ("WARC-Date", date),
            ("WARC-Record-ID", resp_id),
            ("Content-Type", "application/http; msgtype=response"),
            ("WARC-Warcinfo-ID", w.warcinfo_id),
            ("WARC-Concurrent-To", req_id),
            ("WARC-IP-Address", ip),
            ("WARC-Target-URI", page.url),
        ]
        if page.payload is not None:
            headers.append(("WARC-Payload-Digest", _sha1_b32(page.payload)))
        headers.append(("WARC-Block-Digest", _sha1_b32(page.block)))
        if page.identified_type:
            headers.append(("WARC-Identified-Payload-Type", page.identified_type))
        offset = w.write("response", headers, page.block, cut=mode != "normal",
                         counted=mode != "lost")
        if mode != "truncated":
            meta_block = (f"fetchTimeMs: {self.rng.randint(40, 900)}\r\n"
                          f"charset-detected: {(page.charset or 'binary').upper()}\r\n"
                          ).encode("ascii")
            w.write("metadata", [
                ("WARC-Type", "metadata"),
                ("WARC-Date", date),
                ("WARC-Record-ID", meta_id),
                ("Content-Type", "application/warc-fields"),
                ("WARC-Warcinfo-ID", w.warcinfo_id),
                ("WARC-Concurrent-To", resp_id),
                ("WARC-Target-URI", page.url),
                ("WARC-Block-Digest", _sha1_b32(meta_block)),
            ], meta_block)
        return resp_id, offset

    def label(self, w: _WarcWriter, page: _Page, record_id: str, offset: int) -> str:
        doc_id = doc_id_from_record_id(record_id)
        self.labels.append({
            "file": w.name,
            "record_id": record_id,
            "doc_id": doc_id,
            "offset": offset,
            "url": page.url,
            "host": page.site.host,
            "lang": page.lang,
            "kind": page.kind,
            "expected_ingest": page.expected,
            "duplicate_of": page.duplicate_of,
            "jaccard": page.jaccard,
            "jaccard_target": page.jaccard_target,
            "pii": page.pii,
            "charset": page.charset,
            "probe": page.probe,
            "article_text": page.article_text,
            "expected_filter": _expected_filter(page),
        })
        return doc_id

    def corrupt_label(self, w: _WarcWriter, offset: int) -> None:
        self.labels.append({
            "file": w.name,
            "record_id": None,
            "doc_id": None,
            "offset": offset,
            "url": None,
            "host": None,
            "lang": None,
            "kind": "corrupt",
            "expected_ingest": CORRUPT_RECORD,
            "duplicate_of": None,
            "jaccard": None,
            "jaccard_target": None,
            "pii": [],
            "charset": None,
            "probe": None,
            "article_text": None,
            "expected_filter": None,
        })

    def write_file(self, index: int) -> str:
        rng = self.rng
        name = _file_name(index)
        plan = _plan_file(rng, index, self.files, self.pages)
        w = _WarcWriter(name, rng)
        w.write_warcinfo(_warc_date(self.tick()))
        self.pool_prev += self.pool_cur
        self.pool_cur = []
        originals: list[tuple[str, _Article, _Page]] = []
        near_targets = list(NEAR_DUPLICATE_TARGETS)
        exact_done = 0
        for i, slot in enumerate(plan.slots):
            self.tick()
            mode = "normal"
            article = None
            if slot in ("article", "near_original", "lost", "truncated"):
                lang = "en" if slot != "article" else None
                page, article = self.article_page(lang)
                if slot == "lost":
                    mode = "lost"
                elif slot == "truncated":
                    page.kind, page.expected = "truncated", TRUNCATED_RECORD
                    mode = "truncated"
                elif slot == "near_original":
                    page.article_text = article.text()
            elif slot == "exact_duplicate":
                # From the second file on, the first exact duplicate copies an article of an
                # earlier file, so dedup has to work across input files.
                use_prev = exact_done == 0 and self.pool_prev
                pool = self.pool_prev if use_prev else self.pool_cur
                orig_id, orig = pool.pop(rng.randrange(len(pool)))
                exact_done += 1
                self.page_no += 1
                page = _Page("exact_duplicate", KEPT, orig.site,
                             orig.url.replace(f"https://{orig.site.host}/",
                                              f"https://{orig.site.host}/print/", 1)
                             .replace(".html", f"-p{self.page_no}.html"),
                             orig.block, orig.payload, lang=orig.lang,
                             identified_type=orig.identified_type, duplicate_of=orig_id,
                             charset=orig.charset, body=orig.body)
            elif slot == "near_duplicate":
                orig_id, orig_article, orig_page = originals.pop(0)
                target = near_targets.pop(0)
                copy, score = _near_duplicate(rng, orig_article, target)
                page = self.html_page("near_duplicate", orig_page.site, "en", copy, self.clock,
                                      url=self.url(orig_page.site, copy.title, "updates/"))
                page.duplicate_of = orig_id
                page.jaccard = round(score, 6)
                page.jaccard_target = target
                page.article_text = copy.text()
            elif slot == "pii":
                page = self.pii_page()
            elif slot == "spam":
                page = self.spam_page()
            elif slot == "low_quality":
                page = self.low_quality_page()
            elif slot == "blocked_url":
                page = self.blocked_url_page()
            elif slot in ("mojibake", "garbled"):
                page = self.repair_page(slot)
            elif slot in ("legacy_latin1", "legacy_cp1251"):
                page = self.legacy_page(slot)
            elif slot == "too_large":
                page = self.too_large_page()
            else:
                page = self.dropped_page(slot)

            record_id, offset = self.emit(w, page, mode)
            if mode == "lost":
                # The page is gone; only the damaged region is labelled.
                self.corrupt_label(w, offset)
            else:
                doc_id = self.label(w, page, record_id, offset)
                if slot == "near_original":
                    originals.append((doc_id, article, page))
                elif slot == "article":
                    self.pool_cur.append((doc_id, page))
            if plan.damage == "garbage" and i == plan.garbage_after:
                offset = len(w.buf)
                garbage = bytearray(rng.randbytes(rng.randint(190, 230)))
                # Never the gzip magic: the damage must not look like a member start.
                if garbage[:2] == b"\x1f\x8b":
                    garbage[0] = 0
                w.buf += garbage
                self.corrupt_label(w, offset)

        (self.out / name).write_bytes(bytes(w.buf))
        self.records.update(w.counts)
        return name

    def run(self) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        names = [self.write_file(i) for i in range(self.files)]
        with open(self.out / LABELS_FILE, "w", encoding="utf-8", newline="\n") as f:
            for label in self.labels:
                f.write(json.dumps(label, ensure_ascii=False) + "\n")
        expected = Counter(lab["expected_ingest"] for lab in self.labels)
        summary = {
            "seed": self.seed,
            "files": names,
            "records_by_type": {t: self.records[t] for t in ("warcinfo",) + _PAGE_TYPES},
            "responses": self.records["response"],
            "expected_ingest": {r: expected[r] for r in (KEPT,) + INGEST_REASONS},
            "kinds": dict(sorted(Counter(lab["kind"] for lab in self.labels).items())),
        }
        (self.out / SUMMARY_FILE).write_text(
            json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        return summary


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def write_sample_crawl(
    out_dir: str | Path,
    files: int = 3,
    pages_per_file: int = 60,
    seed: int = 7,
    huge_bytes: int = 2_200_000,
) -> dict[str, Any]:
    """Write the sample crawl and its labels into out_dir; returns the summary that is also
    written to labels-summary.json.

    pages_per_file counts response records per file, damaged ones included; the planted kinds
    take a fixed number of them and plain articles fill the rest.
    """
    if files < 1:
        raise ValueError("files must be at least 1")
    return _Generator(Path(out_dir), files, pages_per_file, seed, huge_bytes).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tokenmill.jobs.sample_crawl",
        description="Write a seeded Common-Crawl-style sample crawl with labelled faults.",
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--files", type=int, default=3, help="number of WARC files")
    parser.add_argument("--pages-per-file", type=int, default=60,
                        help="response records per file")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--huge-bytes", type=int, default=2_200_000,
                        help="size limit the too_large page exceeds")
    args = parser.parse_args(argv)
    try:
        summary = write_sample_crawl(args.out, args.files, args.pages_per_file, args.seed,
                                     args.huge_bytes)
    except ValueError as exc:
        parser.error(str(exc))
    dropped = " ".join(
        f"{reason}={n}" for reason, n in summary["expected_ingest"].items()
        if reason != KEPT and n
    )
    print(
        f"wrote {len(summary['files'])} files to {args.out}: {summary['responses']} responses, "
        f"{summary['expected_ingest'][KEPT]} kept, dropped {dropped}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
