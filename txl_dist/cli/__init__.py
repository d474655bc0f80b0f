"""The command-line tools: each module is one command and imports the library, never another."""
