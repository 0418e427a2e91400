"""The built-in domains (the paper's six) and the registry that also holds the user's own.

Each built-in domain reads its files under ``--data-dir`` (laid out as ``shared/eval-data``; its
README lists them).  A user's domain is a ``Domain`` object registered from a Python path
(``--domain-module mypkg.evals:MY_DOMAIN``), from the entry point group ``sandboxlite.eval_domains``,
or written as a JSONL file of tasks (``--tasks FILE``, see ``custom.py``).
"""

from __future__ import annotations

import csv
import importlib
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from ..agent.paths import DEFAULT_WORKDIR
from ..errors import ConfigError, TaskError
from .items import Domain, EvalItem
from .score import Score

ENTRY_POINT_GROUP = "sandboxlite.eval_domains"
_REGISTRY: dict[str, Domain] = {}
_loaded = False  # built-ins and entry points are added on first use
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]+")


def safe_id(text: Any) -> str:
    return _SAFE_ID.sub("_", str(text)).strip("_.-")[:100] or "item"


def _missing(path: Path) -> TaskError:
    """A domain's data is not there: how to get it (the domain is the first folder under the data dir)."""
    return TaskError("data", f"{path} not found",
                     hint="sandboxlite data pull DOMAIN (see sandboxlite data list), or --data-dir pointing at an "
                     "eval-data folder")  # fmt: skip


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise _missing(path)
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise TaskError("data", f"{path}:{n} is not valid JSON: {e.msg}") from None
    return rows


# -- math: AIME 2025 ------------------------------------------------------------------------------
MATH_SUFFIX = "\n\nPut your final answer within \\boxed{}."


def load_math(data_dir: Path) -> list[EvalItem]:
    rows = _jsonl(data_dir / "math" / "aime25_math-ai_variant" / "test.jsonl")
    return [EvalItem(f"aime25-{i:02d}", "math", r["problem"] + MATH_SUFFIX, {"answer": str(r["answer"])})
            for i, r in enumerate(rows)]  # fmt: skip


def score_math(item: EvalItem, response: str, judge: Any = None) -> Score:
    from .scoring.mathans import score_math as score

    return score(response, item.reference["answer"])


# -- physics: UGPhysics ----------------------------------------------------------------------------
def _physics_query(row: dict) -> str:
    q = row["problem"].strip()
    if row.get("is_multiple_answer"):
        q += ("\n\nThis problem has several answers: give them all, in the order asked, in one "
              "\\boxed{} separated by commas.")  # fmt: skip
    else:
        q += "\n\nPut your final answer within \\boxed{}."
    if row.get("unit"):
        q += f" Give the answer in {row['unit']} (the unit need not be repeated in the box)."
    return q


def load_physics(data_dir: Path) -> list[EvalItem]:
    root = data_dir / "physics" / "ugphysics"
    if not root.is_dir():
        raise _missing(root)
    items = []
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        for r in _jsonl(sub / "en.jsonl"):
            ref = {"answers": r["answers"], "answer_type": r.get("answer_type"), "unit": r.get("unit"),
                   "question": r["problem"]}  # fmt: skip
            items.append(EvalItem(f"{sub.name}-{r['index']}", "physics", _physics_query(r), ref, stratum=sub.name,
                                  metadata={"subject": r.get("subject"), "level": r.get("level")}))  # fmt: skip
    return items


def score_physics(item: EvalItem, response: str, judge: Any = None) -> Score:
    from .scoring.mathans import extract_boxed
    from .scoring.physics import score_physics as score

    ref = item.reference
    answers = ref["answers"]
    if isinstance(answers, str):
        answers = extract_boxed(answers) or [answers]
    result = score(response, list(answers), answer_type=ref.get("answer_type"), unit=ref.get("unit"))
    if judge is not None:  # stored beside the rule-based score, never replacing it
        v = judge.judge(ref["question"], response, "; ".join(answers), domain="physics")
        result.details["judge"] = _verdict_dict(v)
        if v.correct is not None:
            result.metrics["judge"] = 1.0 if v.correct else 0.0
    return result


# -- chemistry (MMLU stand-in for ChemBench4K) and biomedicine (MedXpertQA) ------------------------
CHOICE_SUFFIX = "\n\nAnswer with the letter of the correct option, as \\boxed{{X}} where X is one of {letters}."


def load_chem(data_dir: Path) -> list[EvalItem]:
    root = data_dir / "chem" / "mmlu_chemistry_fallback"
    items = []
    for name, short in (("college_chemistry_test.csv", "college"), ("high_school_chemistry_test.csv", "hs")):
        path = root / name
        if not path.is_file():
            raise _missing(path)
        with path.open(encoding="utf-8", newline="") as f:
            for i, row in enumerate(csv.reader(f)):
                question, options, label = row[0], row[1:5], row[5].strip()
                text = question + "\n" + "\n".join(f"{letter}. {opt}" for letter, opt in zip("ABCD", options))
                items.append(EvalItem(f"{short}-{i:03d}", "chem", text + CHOICE_SUFFIX.format(letters="A, B, C, D"),
                                      {"label": label, "letters": "ABCD", "question": text}, stratum=short))  # fmt: skip
    return items


def load_biomed(data_dir: Path) -> list[EvalItem]:
    items = []
    for r in _jsonl(data_dir / "biomed" / "medxpertqa_text.jsonl"):
        letters = "".join(sorted(r["options"]))
        label = r["label"][0] if isinstance(r["label"], list) else r["label"]
        query = r["question"] + CHOICE_SUFFIX.format(letters=", ".join(letters))
        items.append(EvalItem(safe_id(r["id"]), "biomed", query, {"label": label, "letters": letters,
                              "question": r["question"]}, stratum=str(r.get("medical_task", "")),
                              metadata={"body_system": r.get("body_system"), "question_type": r.get("question_type")}))  # fmt: skip
    return items


def score_choice(item: EvalItem, response: str, judge: Any = None) -> Score:
    from .scoring.choice import score_choice as score

    return score(response, item.reference["label"], letters=item.reference["letters"])


# -- long context: AA-LCR --------------------------------------------------------------------------
DOCS_PATH = f"{DEFAULT_WORKDIR}/documents"  # a task path: <workdir>/documents where the item runs


def load_long_context(data_dir: Path) -> list[EvalItem]:
    root = data_dir / "long_context" / "aa_lcr"
    docs: dict[str, dict[str, str]] = {}
    items = []
    for r in _jsonl(root / "aa_lcr_questions.jsonl"):
        name = r["document_set"]
        if name not in docs:
            folder = root / "documents" / name
            if not folder.is_dir():
                raise TaskError("data", f"{folder} not found (document set of question {r['id']})")
            docs[name] = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.txt"))}
        query = (f"{r['question']}\n\nAnswer from the {len(docs[name])} documents provided. End with a line "
                 "'Answer: ...' that states the final answer.")  # fmt: skip
        items.append(EvalItem(f"lcr-{r['id']:03d}" if isinstance(r["id"], int) else safe_id(r["id"]), "long_context",
                              query, {"answer": r["answer"], "question": r["question"]}, files=docs[name],
                              input_path=DOCS_PATH, stratum=name))  # fmt: skip
    return items


def score_long_context(item: EvalItem, response: str, judge: Any = None) -> Score:
    from .scoring.longctx import score_long_context as score

    result = score(response, item.reference["answer"])
    if judge is None:
        return result
    v = judge.judge(item.reference["question"], response, item.reference["answer"], domain="long_context")
    result.details["judge"] = _verdict_dict(v)
    if v.correct is None:  # the judge failed: keep the approximate score, say so
        return result
    return Score(1.0 if v.correct else 0.0, result.extracted, {**result.metrics, "rule_based": result.value},
                 result.details, approximate=False)  # fmt: skip


# -- instruction following: IFBench ----------------------------------------------------------------
def load_instruct(data_dir: Path) -> list[EvalItem]:
    rows = _jsonl(data_dir / "instruct_follow" / "IFBench_test.jsonl")
    return [EvalItem(f"if-{safe_id(r['key'])}", "instruct", r["prompt"],
                     {"instruction_id_list": r["instruction_id_list"], "kwargs": r["kwargs"], "prompt": r["prompt"]})
            for r in rows]  # fmt: skip


def score_instruct(item: EvalItem, response: str, judge: Any = None) -> Score:
    from .scoring.ifbench import score_ifbench

    ref = item.reference
    return score_ifbench(response, ref["instruction_id_list"], ref["kwargs"], prompt=ref["prompt"])


# -- RL training stand-ins: DREAM (dialogue + multiple choice) and QED (paragraph + free form) ----
def load_dream(data_dir: Path) -> list[EvalItem]:
    path = data_dir / "instruct_pretrain" / "dream" / "test.json"
    if not path.is_file():
        raise _missing(path)
    items = []
    for dialogue, questions, dialogue_id in json.loads(path.read_text(encoding="utf-8")):
        doc = {"dialogue.txt": "\n".join(dialogue) + "\n"}
        for k, q in enumerate(questions):
            letters = "ABCDE"[: len(q["choice"])]
            options = "\n".join(f"{letter}. {c}" for letter, c in zip(letters, q["choice"]))
            label = letters[q["choice"].index(q["answer"])]
            query = (f"Read the dialogue provided, then answer: {q['question']}\n{options}"
                     + CHOICE_SUFFIX.format(letters=", ".join(letters)))  # fmt: skip
            items.append(EvalItem(f"dream-{safe_id(dialogue_id)}-{k}", "dream", query,
                                  {"label": label, "letters": letters, "question": q["question"]}, files=doc,
                                  input_path=DOCS_PATH))  # fmt: skip
    return items


def load_qed(data_dir: Path) -> list[EvalItem]:
    items = []
    for r in _jsonl(data_dir / "instruct_pretrain" / "qed" / "qed-dev.jsonlines"):
        answers = sorted({a["string"] for group in r.get("original_nq_answers", []) for a in group})
        if not answers:
            continue
        query = (f"Using the passage provided, answer the question: {r['question_text']}?\n\nEnd with a line "
                 "'Answer: ...' holding just the answer (a short span of the passage).")  # fmt: skip
        items.append(EvalItem(f"qed-{safe_id(str(r['example_id']).replace('-', 'm'))}", "qed", query,
                              {"answers": answers, "question": r["question_text"]},
                              files={"passage.txt": f"{r.get('title_text', '')}\n\n{r['paragraph_text']}\n"},
                              input_path=DOCS_PATH))  # fmt: skip
    return items


def score_qed(item: EvalItem, response: str, judge: Any = None) -> Score:
    """Right when any reference span is contained (whole tokens) in the final answer; approximate."""
    from .scoring.longctx import score_long_context

    scores = [score_long_context(response, a) for a in item.reference["answers"]]
    best = max(scores, key=lambda s: (s.value, s.metrics.get("rouge_l", 0.0)))
    best.details["references"] = len(scores)
    return best


def _verdict_dict(v: Any) -> dict:
    return {"correct": v.correct, "raw": v.raw, "usage": getattr(v, "usage", {}), "error": v.error}


BUILTIN = (
    Domain("math", "AIME 2025 (30), \\boxed{} answer, math-verify", load_math, score_math, paper_n=30),
    Domain("physics", "UGPhysics (5,520 over 13 subjects), rule-based + optional judge", load_physics, score_physics,
           paper_n=650),  # fmt: skip
    Domain("chem", "MMLU chemistry (304; stand-in for ChemBench4K), multiple choice A-D", load_chem, score_choice,
           paper_n=450),  # fmt: skip
    Domain("biomed", "MedXpertQA text (2,450), multiple choice A-J", load_biomed, score_choice, paper_n=500),
    Domain("long_context", "AA-LCR (100 over 30 document sets), judge or approximate match", load_long_context,
           score_long_context, paper_n=100, uses_judge=True),  # fmt: skip
    Domain("instruct", "IFBench (300), the project's own checkers, strict and loose", load_instruct, score_instruct,
           paper_n=300),  # fmt: skip
    # not part of the paper's evaluation: stand-ins for its RL training data (rewards for rl/)
    Domain("dream", "DREAM dialogues (2,041 questions), multiple choice; RL training stand-in", load_dream,
           score_choice),  # fmt: skip
    Domain("qed", "QED (1,355 passages), free-form span answers, approximate match; RL training stand-in", load_qed,
           score_qed),  # fmt: skip
)
PAPER_DOMAINS = ("math", "physics", "chem", "biomed", "long_context", "instruct")


def register_domain(domain: Domain, *, replace: bool = False) -> Domain:
    if not isinstance(domain, Domain):
        raise ConfigError("domain", f"expected a sandboxlite.eval.Domain, got {type(domain).__name__}")
    if domain.name in _REGISTRY and not replace and _REGISTRY[domain.name] is not domain:
        raise ConfigError("domain", f"a domain named {domain.name!r} is already registered")
    _REGISTRY[domain.name] = domain
    return domain


def load_domain_module(spec: str) -> list[Domain]:
    """Register the domain(s) that ``"package.module:NAME"`` names (a Domain or a list of them)."""
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError("domain-module", f"cannot import {module_name!r}: {e}") from None
    obj = getattr(module, attr, None) if attr else getattr(module, "DOMAINS", None)
    if obj is None:
        raise ConfigError("domain-module", f"{module_name} has no {attr or 'DOMAINS'} "
                          "(expected module:NAME naming a Domain or a list of Domains)")  # fmt: skip
    found = obj if isinstance(obj, (list, tuple)) else [obj]
    return [register_domain(d, replace=True) for d in found]


def _entry_points() -> None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as e:  # a broken plugin must not break the built-ins
            raise ConfigError("domain", f"entry point {ep.name!r} ({ep.value}) failed to load: {e}") from None
        for d in obj if isinstance(obj, (list, tuple)) else [obj]:
            register_domain(d, replace=True)


def domains() -> dict[str, Domain]:
    """Every known domain: the built-ins, then entry points, then what was registered."""
    global _loaded
    if not _loaded:
        _loaded = True
        for d in BUILTIN:
            _REGISTRY.setdefault(d.name, d)
        _entry_points()
    return dict(_REGISTRY)


def get_domain(name: str) -> Domain:
    known = domains()
    if name not in known:
        raise ConfigError("domains", f"unknown domain {name!r} (known: {', '.join(known)})")
    return known[name]
