"""The statistics the verdicts rest on: launcher verdicts (paired and unpaired), the rounds each test
needs, change points."""
