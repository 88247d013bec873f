"""The course material around the library: toy maths, figures, widgets, quizzes and headless notebook runs."""
