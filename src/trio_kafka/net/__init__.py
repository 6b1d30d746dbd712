"""See docs/design.md for what this layer does and may import."""
