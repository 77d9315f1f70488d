"""The documentation site's generated pages: the configuration and rule-file references from the
settings and rule models (and their fields' ``#:`` comments), the packs catalogue from ``rules/``,
and the CLI reference from ``mend``'s parser. ``mkdocs.yml`` runs :mod:`docsgen.hook` at build
time, so the tables cannot drift from the code."""
