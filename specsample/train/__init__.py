"""Training T5 pairs with optax (used to build the bundled English->German models)."""
