"""Pure parts of the Label Studio bridge: the labeling interface, task bodies, answers.

The interface shows the record (its id and payload), one line of context (model, segment,
score, prediction, deadline) and two choices. Each choice carries ``alias="1"`` / ``alias="0"``,
so Label Studio stores the class, not the wording, in the annotation: renaming the choices
later does not change what an old answer means.

Deciding a task's label from its annotations (``decide``):

- cancelled (skipped) annotations are "declined": counted, never a label;
- ``first``: the earliest (lowest id) answered annotation decides;
- ``majority``: once ``n`` answers are in, the class chosen by more than half decides
  (``n`` odd, so two classes cannot tie); fewer answers decide nothing yet.

An edit changes an annotation's answer in place; the decision is recomputed, and when it
differs from the label already published the bridge publishes the new one, which the daemon
treats as a conflicting label (the first stands, the conflict is dead-lettered and counted).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import quoteattr

from monitor.bridges.ls_config import Policy, Wording

FROM_NAME = "label"
TO_NAME = "record"
_MAX_PAYLOAD_CHARS = 20_000
# the keys of a task's ``data`` (``task_body``): Label Studio refuses an import whose tasks lack
# a key the labeling interface names as an attribute ``value="$key"``; a ``$`` inside other text
# (instructions "Amounts are in $USD") names none
DATA_KEYS = frozenset(
    ("record_id", "payload", "context", "model", "segment", "score", "prediction", "deadline")
)
_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def label_config(wording: Wording) -> str:
    """The Label Studio labeling interface (XML) of an audit project."""
    return (
        "<View>\n"
        f'  <Header value={quoteattr(wording.instructions)} size="5"/>\n'
        '  <Header value="$context" size="6"/>\n'
        '  <Header value="Record $record_id" size="4"/>\n'
        f'  <Text name="{TO_NAME}" value="$payload"/>\n'
        f'  <Choices name="{FROM_NAME}" toName="{TO_NAME}" choice="single-radio" '
        'showInline="true" required="true">\n'
        f'    <Choice value={quoteattr(wording.positive)} alias="1"/>\n'
        f'    <Choice value={quoteattr(wording.negative)} alias="0"/>\n'
        "  </Choices>\n"
        "</View>\n"
    )


def interface_problem(config: Any, wording: Wording) -> str | None:
    """What keeps a project's labeling interface from being the bridge's, or None.

    The bridge's answers are read from one single-choice ``Choices`` named ``FROM_NAME`` whose
    every choice gives a class (alias "1"/"0", or the model's wording without an alias) and
    that offers both classes; its tasks carry only ``DATA_KEYS``. An interface edited by hand,
    or a project of the same title made for something else, made every answer unreadable (or
    every import refused) and was noticed only then.
    """
    if not isinstance(config, str):
        return "the project has no labeling interface"
    try:
        root = ET.fromstring(config)
    except ET.ParseError as exc:
        return f"the labeling interface is not XML: {exc}"
    unknown = sorted(
        {
            variable[1]
            for element in root.iter()
            for value in element.attrib.values()
            if (variable := _VARIABLE.fullmatch(value.strip())) is not None
        }
        - DATA_KEYS
    )
    if unknown:
        return (
            f"the interface shows {', '.join('$' + n for n in unknown)}, which the bridge's "
            "tasks do not carry (Label Studio refuses their import)"
        )
    found = [c for c in root.iter("Choices") if c.get("name") == FROM_NAME]
    if len(found) != 1:
        return f'the interface has {len(found)} Choices named "{FROM_NAME}", not one'
    if found[0].get("choice", "single") == "multiple":
        return f'the Choices named "{FROM_NAME}" lets an auditor pick several choices'
    classes = {"1": 1, "0": 0, wording.positive: 1, wording.negative: 0}
    given: set[int] = set()
    for option in found[0].iter("Choice"):
        stored = option.get("alias", option.get("value"))
        if stored not in classes:
            return (
                f"the choice {option.get('value')!r} gives no class: each choice must be "
                f'{wording.positive!r} (alias "1") or {wording.negative!r} (alias "0")'
            )
        given.add(classes[stored])
    missing = [w for c, w in ((1, wording.positive), (0, wording.negative)) if c not in given]
    if missing:
        return f"no choice gives the class of {' or '.join(repr(w) for w in missing)}"
    return None


def project_fields(title: str, wording: Wording, answers_needed: int) -> dict[str, Any]:
    """The body of ``POST /api/projects`` for a new audit project."""
    return {
        "title": title,
        "description": "Audit requests of activeaudit-monitor: choose each record's true class.",
        "label_config": label_config(wording),
        "expert_instruction": wording.instructions,
        "show_instruction": True,
        "show_skip_button": True,
        "skip_queue": "REQUEUE_FOR_OTHERS",  # a skipped task goes to another annotator
        "maximum_annotations": answers_needed,
    }


def _utc(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def task_body(
    request: Mapping[str, Any], wording: Wording, bridge: str | None = None
) -> dict[str, Any]:
    """The task imported for one request: what the auditor sees in ``data``, ids in ``meta``.

    ``meta`` holds ``request_id``, ``token``, ``pi``, ``model``, ``ts`` and ``deadline`` (not
    shown, not editable: the bridge rebuilds its state file from them), and ``bridge``, the
    importing bridge's id (``BridgeState.instance``: a second bridge on a project shows); ``data``
    the record id, its payload as indented JSON, and one context line.
    """
    pred = wording.positive if request["pred"] == 1 else wording.negative
    segment = request["segment"] or "(none)"
    context = (
        f"model {request['model']} · segment {segment} · score {request['score']:.4g} · "
        f"the model predicted: {pred} · answer before {_utc(request['deadline'])}"
    )
    payload = request.get("payload")
    text = json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    if len(text) > _MAX_PAYLOAD_CHARS:
        text = text[:_MAX_PAYLOAD_CHARS] + "\n... (cut)"
    meta: dict[str, Any] = {
        "request_id": request["request_id"],
        "pi": request["pi"],
        "model": request["model"],
        "ts": request["ts"],
        "deadline": request["deadline"],
    }
    if request.get("token") is not None:
        meta["token"] = request["token"]
    if bridge is not None:
        meta["bridge"] = bridge
    return {
        "data": {
            "record_id": request["id"],
            "payload": text,
            "context": context,
            "model": request["model"],
            "segment": request["segment"],
            "score": request["score"],
            "prediction": pred,
            "deadline": _utc(request["deadline"]),
        },
        "meta": meta,
    }


@dataclass(frozen=True)
class Answer:
    """One annotation as the bridge reads it."""

    annotation_id: int
    declined: bool  # cancelled (skipped) in Label Studio
    label: int | None  # 0/1, None when declined or without a readable choice
    labeler: str


def read_answer(annotation: Mapping[str, Any], wording: Wording) -> Answer | None:
    """An annotation dict from the API -> ``Answer`` (None when it has no integer id).

    The choice is read as the alias ("1"/"0"), or as the wording itself for an interface
    without aliases (a project made by hand).
    """
    ann_id = annotation.get("id")
    if not isinstance(ann_id, int) or isinstance(ann_id, bool):
        return None
    by = annotation.get("completed_by")
    if isinstance(by, Mapping):
        by = by.get("email") or by.get("id")
    labeler = f"labelstudio:{by}" if by is not None else "labelstudio"
    if annotation.get("was_cancelled"):
        return Answer(ann_id, True, None, labeler)
    return Answer(ann_id, False, _choice(annotation.get("result"), wording), labeler)


def _choice(result: Any, wording: Wording) -> int | None:
    classes = {"1": 1, "0": 0, wording.positive: 1, wording.negative: 0}
    if not isinstance(result, list):
        return None
    for item in result:
        if not isinstance(item, Mapping) or item.get("from_name") != FROM_NAME:
            continue
        value = item.get("value")
        choices = value.get("choices") if isinstance(value, Mapping) else None
        if isinstance(choices, list) and len(choices) == 1 and choices[0] in classes:
            return classes[choices[0]]
    return None


@dataclass(frozen=True)
class Decision:
    """The label a task's answers give (None: none yet) and who gave it."""

    label: int | None
    labeler: str | None


def decide(answers: Sequence[Answer], policy: Policy, majority_of: int) -> Decision:
    """The task's label under ``policy`` (see the module docstring)."""
    given = sorted(
        (a for a in answers if not a.declined and a.label is not None),
        key=lambda a: a.annotation_id,
    )
    if not given:
        return Decision(None, None)
    if policy == "first":
        return Decision(given[0].label, given[0].labeler)
    if len(given) < majority_of:
        return Decision(None, None)
    ones = sum(a.label == 1 for a in given)
    zeros = len(given) - ones
    if ones == zeros:
        return Decision(None, None)
    label = 1 if ones > zeros else 0
    return Decision(label, f"labelstudio:majority-{max(ones, zeros)}-of-{len(given)}")
