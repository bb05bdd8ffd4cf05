"""The one error every checkpoint reader raises."""


class CheckpointError(ValueError):
  """A checkpoint is missing, corrupt, or does not fit the model it should describe."""
