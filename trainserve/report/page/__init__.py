"""The page: a run's records lined up into the typed Report (analysis), the side-by-side table and its figures,
and the HTML and Markdown that place every section's part."""
