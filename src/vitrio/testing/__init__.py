"""What the tests of vitrio and the authors of formats share: files made by independent encoders, and
the conformance suites.

- `mrc`: MRC headers and files made byte by byte from the specification.
- `dm`: DigitalMicrograph tag trees and files.
- `eer`: an encoder of EER movies of electron events.
- `conformance`: the test classes every format and every reader provider
  passes; subclass them in a test module of your own (they need pytest,
  which the other modules do not).

Nothing here is imported by `vitrio` itself.
"""
