"""Pure (sans-I/O) parts of the Spark connectors: the Direct Get reply parser and option parsing."""
