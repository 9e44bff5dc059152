"""Example training scripts that sum their gradients through the switch."""
