"""The Job controller: admits Jobs, runs every index as Attempts and keeps the Job's status."""
