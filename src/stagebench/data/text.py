"""Text helpers: HTML stripping and the document text template."""

from __future__ import annotations

import html
import re
import string
from collections.abc import Mapping
from html.parser import HTMLParser

_WS = re.compile(r"\s+")
_BLOCK_TAGS = {"br", "p", "div", "li", "ul", "ol", "tr", "td", "th", "h1", "h2", "h3", "h4", "h5", "h6", "table"}


class _Stripper(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag, attrs):  # noqa: ANN001
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append(" ")

    def handle_endtag(self, tag):  # noqa: ANN001
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag in _BLOCK_TAGS:
            self.parts.append(" ")

    def handle_data(self, data):  # noqa: ANN001
        if not self._skip:
            self.parts.append(data)


def strip_html(text: str | None) -> str:
    """Remove tags (block tags become spaces), unescape entities, collapse whitespace."""
    if not text:
        return ""
    if "<" not in text and "&" not in text:
        return _WS.sub(" ", text).strip()
    p = _Stripper()
    p.feed(text)
    p.close()
    return _WS.sub(" ", html.unescape("".join(p.parts))).strip()


def _srs_product(fields: Mapping[str, str | None]) -> str:
    """search-ranking-stack's ESCI product text: the title, ``"Brand: " + brand``, the bullet
    points and the first 500 characters of the description, joined by spaces, each part only
    when present."""
    desc = fields.get("description") or ""
    parts = [fields.get("title") or "", f"Brand: {fields['brand']}" if fields.get("brand") else "",
             fields.get("bullet_points") or "", desc[:500]]  # fmt: skip
    return " ".join(x for x in parts if x)


#: text templates known by name (``text_template: srs``), for texts a ``str.format`` template
#: cannot say (a prefix only when the field is there, a cut description): name -> (fields, renderer)
NAMED_TEMPLATES = {"srs": (("title", "brand", "bullet_points", "description"), _srs_product)}


def template_problem(template: str, known: tuple[str, ...], required: tuple[str, ...]) -> str | None:
    """Why a ``str.format`` prompt template cannot be used - not parseable, a positional field, a
    field outside ``known``, a ``required`` one missing - or None."""
    names = ", ".join("{" + f + "}" for f in known)
    try:
        used = set(template_fields(template))
        if any(f == "" for _, f, _, _ in string.Formatter().parse(template)):
            return f"a positional field {{}} is not allowed; name it ({names})"
    except ValueError as exc:
        return f"not a valid template ({exc}); write literal braces as {{{{ and }}}}"
    unknown = sorted(used - set(known))
    if unknown:
        return f"unknown field(s) {', '.join('{' + u + '}' for u in unknown)} (known: {', '.join(known)})"
    missing = [f for f in required if f not in used]
    if missing:
        return f"the template must use {', '.join('{' + m + '}' for m in missing)}"
    return None


def template_fields(template: str) -> list[str]:
    """The field names a template uses (``"{title} {brand}"`` -> [title, brand]; a named one's fields)."""
    if template in NAMED_TEMPLATES:
        return list(NAMED_TEMPLATES[template][0])
    return [f for _, f, _, _ in string.Formatter().parse(template) if f]


def render(template: str, fields: Mapping[str, str | None]) -> str:
    """Fill the template (or apply the named one); missing/null fields are empty; whitespace is collapsed."""
    if template in NAMED_TEMPLATES:
        return _WS.sub(" ", NAMED_TEMPLATES[template][1](fields)).strip()
    values = {f: (fields.get(f) or "") for f in template_fields(template)}
    return _WS.sub(" ", template.format(**values)).strip()
