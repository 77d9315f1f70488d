"""Small apps written the idiomatic way in real frameworks; each fails through its own machinery."""
