"""The experiment configs (ml_collections, `get_config(arg=None)`), importable from an
installed trdr; the files in the repository's configs/ re-export them for --config."""
