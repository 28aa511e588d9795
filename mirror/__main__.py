from mirror.actors.cli import main

main()
