"""Names people read in lists (a dish, an API key): they must show what is stored.

A name of invisible characters only shows as nothing (a blank dish on the menu), and the
characters that reorder the text around them make a name read differently from what is stored
(a dish "Pizza" followed by a price written backwards), in the dashboard and in the admin.
"""

from __future__ import annotations

import unicodedata

from django import forms

# bidirectional embeddings, overrides and isolates
_REORDERING = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# letters and symbols drawn as blank space (Hangul fillers, the blank Braille pattern)
_BLANK = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def shown_name(value: str) -> str:
    """``value`` stripped, if it has a visible character (a letter, digit, punctuation mark or
    symbol that is not drawn blank) and nothing that reorders the text around it."""
    value = value.strip()
    if _REORDERING.intersection(value):
        raise forms.ValidationError("Remove the characters that reverse the text's direction.")
    if not any(_visible(ch) for ch in value):
        raise forms.ValidationError("Enter a name with a visible character.")
    return value


def _visible(ch: str) -> bool:
    return unicodedata.category(ch)[0] in "LNPS" and ch not in _BLANK
