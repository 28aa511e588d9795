"""The recall as the Talker reads it: a short plain-text block that never exceeds its budget.

Why bounded in characters rather than items: the Talker's prompt has a fixed budget, and one
long statement must not push the narrative out. Lines are added best first and the block stops
at the first line that would not fit, so what the Talker sees is always the strongest part.
"""

from __future__ import annotations

from .recall import RecallResult

DEFAULT_MAX_CHARS = 1200
_HEADER = "What you remember about this conversation (strongest first):"



def render_recall(result: RecallResult, max_chars: int = DEFAULT_MAX_CHARS) -> str:
    """The recalled beliefs, open questions, contested pairs and causal links, in ``max_chars`` or fewer.

    Returns "" when nothing was recalled or the budget cannot hold the header and one line.
    """
    lines: list[str] = []
    for item in result.items:
        label = "open question" if item.kind == "open_loop" else "belief"
        lines.append(f"- ({label}, strength {item.strength:.2f}) {item.statement}")
    for review in result.reviews:
        lines.append(f"- unresolved: \"{review.statement}\" conflicts with \"{review.opposed_statement}\"")
    for edge in result.edges:
        lines.append(f"- {edge.src} --{edge.relation}--> {edge.dst}")
    if not lines:
        return ""
    block = [_HEADER]
    used = len(_HEADER)
    for line in lines:
        if used + 1 + len(line) > max_chars:
            break
        block.append(line)
        used += 1 + len(line)
    return "\n".join(block) if len(block) > 1 else ""


__all__ = ["DEFAULT_MAX_CHARS", "render_recall"]
