"""autokernel.tui"""
