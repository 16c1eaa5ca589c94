"""One module per command, as Django finds them."""
