"""The wheel as a user installs it."""
