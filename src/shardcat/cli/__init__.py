"""The ``shardcat`` command line: thin, it parses arguments and calls the library."""
