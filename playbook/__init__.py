"""autokernel.playbook"""
