"""The published vitrio 0.1.4 API, as a program written against it uses it: names, behaviours, errors."""
