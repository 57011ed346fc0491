"""The bottom layer: the types every other layer shares (errors answered as JSON, who is
calling), with no dependency on Tornado or any other layer."""
