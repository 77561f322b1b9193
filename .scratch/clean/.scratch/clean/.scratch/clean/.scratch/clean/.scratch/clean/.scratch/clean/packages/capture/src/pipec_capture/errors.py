"""CaptureError: what went wrong while turning a PyTorch program into a pipec Graph."""


class CaptureError(Exception):
    """Capture failed; the message names the op (ATen overload) and says what to do."""
