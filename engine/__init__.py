"""autokernel.engine"""
