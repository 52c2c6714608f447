"""Built-in rule packs (YAML data; each folder with a pack.yaml is a pack)."""
