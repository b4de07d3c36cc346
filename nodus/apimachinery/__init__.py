"""Pure helpers shared by every layer: field paths and errors, selectors, quantities, durations, times.

Nothing here does I/O or imports a web or database library; the API server, the storage layer and
(later) the controllers and agents all build on these types.
"""
