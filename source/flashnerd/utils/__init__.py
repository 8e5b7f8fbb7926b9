"""Small shared helpers: quaternion math and errors."""
