"""The questions the README promises to answer, answered from the typed sections, and their part of the page."""
