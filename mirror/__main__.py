from mirror.actors.cli.app import main

main()
