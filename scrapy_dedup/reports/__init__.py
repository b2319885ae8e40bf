"""Reports read the store through its interface and render it for people."""
